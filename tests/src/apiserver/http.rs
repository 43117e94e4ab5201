//! The request line, headers and query of one HTTP/1.1 request, and the
//! plain (non-streaming) responses: JSON bodies and `Status` failures.

use std::{
    io::{self, BufRead, BufReader, Read, Write},
    net::TcpStream,
};

use serde_json::{Value, json};

/// One parsed request; the body, if any, is read and ignored.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) path: String,
    query: Vec<(String, String)>,
    pub(super) close: bool,
}

impl Request {
    pub(super) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Largest request head or body accepted; kube sends a few hundred bytes.
const MAX_REQUEST: usize = 1 << 20;

/// Reads one request head (and skips its body). `Ok(None)` on a clean EOF
/// between requests.
pub(super) fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<Request>> {
    let bad = |msg: &str| io::Error::new(io::ErrorKind::InvalidData, msg.to_owned());
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("bad request line"));
    };
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut close = version == "HTTP/1.0";
    let mut body_len = 0usize;
    let mut head_len = line.len();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("eof in headers"));
        }
        head_len += line.len();
        if head_len > MAX_REQUEST {
            return Err(bad("request head too large"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(bad("bad header"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body_len = value.parse().map_err(|_| bad("bad content-length"))?;
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked request bodies are not supported"));
        }
    }
    if body_len > MAX_REQUEST {
        return Err(bad("request body too large"));
    }
    io::copy(&mut reader.by_ref().take(body_len as u64), &mut io::sink())?;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(Some(Request {
        method,
        path: percent_decode(path),
        query,
        close,
    }))
}

/// `application/x-www-form-urlencoded` decoding, as kube's query encoder
/// produces it (`+` for space).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
            {
                let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(bytes[i + 1]) << 4 | hex(bytes[i + 2]));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `Status` failure object, as the apiserver sends for errors.
pub(super) fn status(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

pub(super) fn write_json(
    out: &mut TcpStream,
    code: u16,
    body: &Value,
    close: bool,
) -> io::Result<()> {
    write_response(
        out,
        code,
        "application/json",
        body.to_string().as_bytes(),
        close,
    )
}

pub(super) fn write_response(
    out: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        _ => "Error",
    };
    let mut msg = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    )
    .into_bytes();
    if close {
        msg.extend_from_slice(b"Connection: close\r\n");
    }
    msg.extend_from_slice(b"\r\n");
    msg.extend_from_slice(body);
    out.write_all(&msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        assert_eq!(
            percent_decode("metadata.name%3Dnode-1"),
            "metadata.name=node-1"
        );
        assert_eq!(percent_decode("a+in+%28x%2Cy%29"), "a in (x,y)");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
