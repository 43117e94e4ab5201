//! client-go's `rest_client_requests_total` for the kube client: every HTTP
//! request it sends, counted by status code, method and host when its
//! response head arrives (a watch once, when it starts streaming), or with
//! code `<error>` when no response comes (connection refused, timeout).
//!
//! The count rides on tower-http's [`TraceLayer`]: its classifier is made
//! from each request (the method) and is handed that request's response
//! head or error exactly once. The layer logs nothing of its own: kube-rs'
//! trace layer beneath it does.

use std::fmt;

use http::{Request, Response, Uri};
use kube::{
    Client, Config,
    client::{Body, ClientBuilder, retry::RetryPolicy},
};
use tower::{buffer::BufferLayer, retry::RetryLayer};
use tower_http::{
    classify::{ClassifiedResponse, ClassifyResponse, MakeClassifier, NeverClassifyEos},
    trace::TraceLayer,
};
use tracing::Span;

use crate::metrics::{RequestLabels, RestClientRequests};

/// client-go's `code` for a request that got no response.
pub const NO_RESPONSE: &str = "<error>";

/// The layer [`layer`] builds: the count, with every trace hook off.
pub type CountLayer = TraceLayer<CountRequests, fn(&Request<Body>) -> Span, (), (), (), (), ()>;

/// Requests the layers between the retries and the count hold, as kube-rs'
/// own buffer does.
const BUFFERED: usize = 1024;

/// kube-rs' default client for `config`, each of whose requests is counted
/// in `counter`, retried ones once per attempt as client-go counts them:
/// kube-rs retries 429, 503 and 504 beneath any layer added to its stack,
/// so its retries are moved above the count (a buffer makes what they wrap
/// clonable, as they need).
pub fn client(mut config: Config, counter: RestClientRequests) -> Result<Client, kube::Error> {
    let count = layer(counter, &config.cluster_url);
    let retry = std::mem::replace(&mut config.default_retry, false);
    let builder = ClientBuilder::try_from(config)?
        .with_layer(&count)
        .with_layer(&BufferLayer::new(BUFFERED));
    Ok(if retry {
        builder
            .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
            .build()
    } else {
        builder.build()
    })
}

/// A layer counting each request to the apiserver at `cluster_url` in
/// `counter`.
pub fn layer(counter: RestClientRequests, cluster_url: &Uri) -> CountLayer {
    let make_span: fn(&Request<Body>) -> Span = |_| Span::none();
    TraceLayer::new(CountRequests {
        counter,
        host: host(cluster_url),
    })
    .make_span_with(make_span)
    .on_request(())
    .on_response(())
    .on_body_chunk(())
    .on_eos(())
    .on_failure(())
}

/// client-go's `host` label: its URL's host, with the port if the URL
/// names one (`10.96.0.1:443`), without any user info.
fn host(url: &Uri) -> String {
    match url.authority() {
        Some(a) => match a.port_u16() {
            Some(port) => format!("{}:{port}", a.host()),
            None => a.host().to_owned(),
        },
        None => String::new(),
    }
}

/// Makes one [`Count`] per request.
#[derive(Clone, Debug)]
pub struct CountRequests {
    counter: RestClientRequests,
    host: String,
}

impl MakeClassifier for CountRequests {
    type Classifier = Count;
    type FailureClass = ();
    type ClassifyEos = NeverClassifyEos<()>;

    fn make_classifier<B>(&self, req: &Request<B>) -> Count {
        Count {
            counter: self.counter.clone(),
            method: req.method().as_str().to_owned(),
            host: self.host.clone(),
        }
    }
}

/// One request, counted when its outcome is known.
#[derive(Clone, Debug)]
pub struct Count {
    counter: RestClientRequests,
    method: String,
    host: String,
}

impl Count {
    fn count(self, code: String) {
        let labels = RequestLabels {
            code,
            method: self.method,
            host: self.host,
        };
        self.counter.get_or_create(&labels).inc();
    }
}

impl ClassifyResponse for Count {
    type FailureClass = ();
    type ClassifyEos = NeverClassifyEos<()>;

    fn classify_response<B>(self, res: &Response<B>) -> ClassifiedResponse<(), Self::ClassifyEos> {
        self.count(res.status().as_str().to_owned());
        ClassifiedResponse::Ready(Ok(()))
    }

    fn classify_error<E>(self, _error: &E)
    where
        E: fmt::Display + 'static,
    {
        self.count(NO_RESPONSE.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use tower::{Layer as _, ServiceExt as _, service_fn};

    use super::*;

    fn value(m: &RestClientRequests, code: &str, method: &str) -> u64 {
        m.get_or_create(&RequestLabels {
            code: code.to_owned(),
            method: method.to_owned(),
            host: "10.96.0.1:443".to_owned(),
        })
        .get()
    }

    #[test]
    fn the_host_is_the_urls_with_its_port_if_named() {
        let host = |u: &str| host(&u.parse().expect("a URL"));
        assert_eq!(host("https://10.96.0.1:443"), "10.96.0.1:443");
        assert_eq!(
            host("https://user:pw@api.example:6443/"),
            "api.example:6443"
        );
        assert_eq!(host("https://api.example"), "api.example");
        assert_eq!(host("https://[fd00::1]:6443"), "[fd00::1]:6443");
    }

    #[tokio::test]
    async fn each_request_is_counted_once_by_code_and_method_or_as_an_error() {
        let counter = RestClientRequests::default();
        let layer = layer(
            counter.clone(),
            &"https://10.96.0.1:443".parse().expect("a URL"),
        );
        let answers = service_fn(|req: Request<Body>| async move {
            match req.uri().path() {
                "/missing" => Ok(Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::empty())
                    .expect("a response")),
                "/down" => Err("connection refused"),
                _ => Ok::<_, &str>(Response::new(Body::empty())),
            }
        });
        let svc = layer.layer(answers);
        let send = |method: &str, path: &str| {
            let req = Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .expect("a request");
            svc.clone().oneshot(req)
        };
        send("GET", "/api/v1/services").await.expect("200");
        send("GET", "/api/v1/nodes").await.expect("200");
        send("GET", "/missing").await.expect("404");
        assert!(send("POST", "/down").await.is_err(), "no response");
        assert_eq!(value(&counter, "200", "GET"), 2);
        assert_eq!(value(&counter, "404", "GET"), 1);
        assert_eq!(value(&counter, NO_RESPONSE, "POST"), 1);
        assert_eq!(value(&counter, "200", "POST"), 0);
    }
}
