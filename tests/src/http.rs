//! A tiny HTTP/1.1 client for the agent's loopback endpoints, and for
//! addresses inside a test's own network namespaces (health-check ports).

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use anyhow::Context as _;

/// GETs `path`; returns (status, body). The agent listens on loopback only.
pub fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let r = request(addr, "GET", path)?;
    Ok((r.status, r.body))
}

/// An answer: status code, header lines (names lowercased), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` without a body, to a loopback address.
pub fn request(addr: SocketAddr, method: &str, path: &str) -> anyhow::Result<Answer> {
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "refusing to connect to non-loopback {addr}"
    );
    send(addr, method, path)
}

/// [`request`] from inside network namespace `netns`, where any address is
/// one of the test's own namespaces.
pub fn request_in(
    netns: &str,
    addr: SocketAddr,
    method: &str,
    path: &str,
) -> anyhow::Result<Answer> {
    crate::netns::within(netns, || send(addr, method, path))
}

fn send(addr: SocketAddr, method: &str, path: &str) -> anyhow::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").context("no header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status code")?;
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_owned(),
    })
}
