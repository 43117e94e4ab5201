//! Accepting connections and serving the requests on each, until a
//! `stop` cuts them.

use std::{
    io::BufReader,
    net::{Shutdown, TcpListener, TcpStream},
    sync::{Arc, atomic::Ordering},
    thread::{self, JoinHandle},
};

use super::{
    http::{read_request, status, write_json},
    router::handle,
    store::Shared,
};

pub(super) fn spawn_acceptor(
    shared: &Arc<Shared>,
    listener: TcpListener,
    epoch: u64,
) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    thread::spawn(move || {
        for conn in listener.incoming() {
            if shared.state().serve_epoch != epoch {
                break;
            }
            let Ok(conn) = conn else { continue };
            let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            let Ok(clone) = conn.try_clone() else {
                continue;
            };
            shared.conns().insert(id, clone);
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                serve_connection(&shared, conn, epoch);
                shared.conns().remove(&id);
            });
        }
    })
}

fn serve_connection(shared: &Shared, conn: TcpStream, epoch: u64) {
    // Watch events are small writes that must not wait for the peer's
    // delayed ACK (Nagle would add ~40 ms to event latency).
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut out = conn;
    loop {
        let req = match read_request(&mut reader) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e) => {
                let body = status(400, "BadRequest", format!("malformed request: {e}"));
                let _ = write_json(&mut out, 400, &body, true);
                return;
            }
        };
        let keep_alive = match handle(shared, &req, &mut out, epoch) {
            Ok(keep_alive) => keep_alive,
            Err(_) => return,
        };
        if !keep_alive || req.close {
            let _ = out.shutdown(Shutdown::Both);
            return;
        }
    }
}
