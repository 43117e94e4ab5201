//! A tiny HTTP/1.1 GET client for the agent's loopback endpoints.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use anyhow::Context as _;

/// GETs `path`; returns (status, body). The agent listens on loopback only.
pub fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "refusing to connect to non-loopback {addr}"
    );
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").context("no header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status code")?;
    Ok((status, body.to_owned()))
}
