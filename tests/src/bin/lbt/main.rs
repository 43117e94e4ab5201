//! `lbt`: identity backends and clients for the netns tests and the demo.
//!
//! `--cgroup` joins a cgroup and `--netns` enters a namespace with setns(2)
//! before anything else runs (`ip netns exec` would remount /sys and hide the
//! cgroup2 mount). Clients print one JSON report on stdout.
//!
//! `bench-tcp` / `bench-udp` generate load: `--concurrency` worker threads,
//! each doing back-to-back requests for `--seconds`, round-robin over the
//! `--to` addresses; `bench-udp` uses one socket per worker, or with
//! `--socket-per-request` a new connected one per request (a new flow each,
//! as from a DNS resolver), or with `--ask-all` a new unconnected one per
//! request that asks every `--to` address (as musl's resolver asks each
//! nameserver). `bench-tcp` closes every connection with SO_LINGER
//! {on, 0}, i.e. with an RST, so neither side keeps a TIME_WAIT socket and the
//! client never runs out of ephemeral ports; it changes no sysctl at all (so it
//! cannot touch the root namespace's). Benchmarks refuse to run outside a
//! `--netns` unless every target is in 127.0.0.0/8.
//!
//! `pktgen` sends crafted UDP frames out of a veth at full rate from an XDP
//! program (`lb_tests::pktgen`); it refuses to run outside a `--netns`.

mod pktgen;
mod soak;
mod sock;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt, fs,
    io::{self, BufRead, BufReader, Write},
    net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use lb_tests::percentile::percentile;
use serde::Serialize;
use sock::TIMEOUT;

#[derive(Parser)]
struct Cli {
    /// Join this cgroup (v2 directory) first.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Then enter this network namespace (a name under /run/netns).
    #[arg(long)]
    netns: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Answer every TCP line and UDP datagram with `--id`, forever. A
    /// datagram that starts with `#` (a token) gets `<id> <token>` back, so
    /// that a client on one long-lived socket can tell a late reply to an
    /// earlier request from the reply to its current one.
    ///
    /// Other requests: `from?` (both) gets `<id> from <client ip>`. A TCP
    /// `bytes N` gets `<id> `, N bytes of `x` and a newline (a download); a
    /// TCP `later S` gets the id line S seconds later, and then the
    /// connection closes (for a client that half-closed meanwhile). A
    /// datagram of more than 512 bytes that starts with `?` gets a reply as
    /// long: `<id>`, a newline, `x` padding. `push` gets no reply but is
    /// counted, per UDP port, with its source IP; `pushed?` gets `<id>
    /// pushed <count> from <ip>,<ip>...` (the distinct sources, sorted) and
    /// forgets them.
    Serve {
        #[arg(long)]
        id: String,
        #[arg(long)]
        tcp: Vec<u16>,
        #[arg(long)]
        udp: Vec<u16>,
    },
    /// N short TCP connections: connect, one request, one reply, close.
    Tcp {
        #[arg(long)]
        to: SocketAddr,
        #[arg(short, default_value_t = 1)]
        n: u32,
        /// Ask `from?`: the reply is `<id> from <the client address the
        /// backend saw>`.
        #[arg(long)]
        from: bool,
        /// Pad each request to this many bytes (a large request needs
        /// path-MTU discovery to work).
        #[arg(long, default_value_t = 0)]
        size: usize,
        /// Ask `bytes N`: the reply is `<id> `, N bytes of `x` and a newline,
        /// so the backend sends many full-sized segments; a reply of another
        /// length counts as error `ShortReply` (and not in `replies`).
        #[arg(long, value_name = "BYTES", conflicts_with_all = ["from", "size"])]
        download: Option<u64>,
        /// Send `later SECS`, shut down the write side (the client's FIN),
        /// then wait for the reply the backend sends SECS s later: a
        /// half-closed connection must still carry the backend's data.
        #[arg(
            long,
            value_name = "SECS",
            conflicts_with_all = ["from", "size", "download"]
        )]
        half_close_wait: Option<f64>,
    },
    /// N UDP requests, on one connected socket or as unconnected sendto.
    Udp {
        #[arg(long)]
        to: SocketAddr,
        #[arg(short, default_value_t = 1)]
        n: u32,
        #[arg(long)]
        connected: bool,
        /// As for `tcp`.
        #[arg(long)]
        from: bool,
        /// Send `?` padded with `x` to this many bytes (513 to 65527; 0 for
        /// the plain `?`): the backend answers with as many bytes, so both
        /// directions carry IP fragments past the MTU. A reply of another
        /// length counts as error `ShortReply` (and not in `replies`; its
        /// sender still in `peers`).
        #[arg(long, default_value_t = 0, value_parser = udp_size, conflicts_with = "from")]
        size: usize,
        /// Send from this source port (0: any), so that a flow can be sent
        /// again, through another node, with the same 5-tuple.
        #[arg(long, default_value_t = 0)]
        sport: u16,
        /// The socket's path-MTU discovery (`IP_MTU_DISCOVER`,
        /// `IPV6_MTU_DISCOVER`): `dont` sends without don't fragment;
        /// `want` (Linux's default) sets it and fragments what exceeds the
        /// path MTU; `do` never fragments. Unset: the system's default.
        #[arg(long, value_enum)]
        pmtu: Option<Pmtu>,
    },
    /// One-way UDP from one socket: `push` every `--interval-ms` for
    /// `--seconds`, with no reply, then `pushed?`. Its reply (`<id> pushed
    /// <count> from <ip>,...`: the pushes the backend received since it was
    /// last asked, and their distinct sources) goes in `replies`; the number
    /// of pushes sent (send() succeeded) in `sent`.
    UdpPush {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        seconds: f64,
        #[arg(long)]
        interval_ms: u64,
        /// connect() the socket and send(); otherwise sendto().
        #[arg(long)]
        connected: bool,
    },
    /// One TCP connection kept open; each stdin line is one request, or
    /// `peer` for getpeername() now.
    Hold {
        #[arg(long)]
        to: SocketAddr,
    },
    /// One connected UDP socket kept open; each stdin line is one request
    /// (`?`), `reconnect` for a new socket connected to `--to`, or
    /// `connect ADDR` to connect the same socket to ADDR.
    HoldUdp {
        #[arg(long)]
        to: SocketAddr,
    },
    /// Short TCP connections back to back until stdin closes.
    Churn {
        #[arg(long)]
        to: SocketAddr,
    },
    /// Load: C workers doing back-to-back short TCP connections for T s.
    BenchTcp(BenchArgs),
    /// Load: C workers doing back-to-back UDP request/reply for T s.
    BenchUdp(BenchArgs),
    /// Load: C workers creating a UDP socket, connecting it to the next
    /// `--to` address and closing it, back to back for T s; no datagram is
    /// sent. What the connect hook costs every connection of the node.
    /// `--tcp`: TCP sockets; `--sendto`: datagrams from one unconnected
    /// socket per worker instead (the sendmsg hook).
    BenchConnect(BenchArgs),
    /// The soak's client: requests without pause to the Services named on
    /// stdin, until stdin closes; tallies on stdout.
    SoakClient(soak::Args),
    /// UDP frames (or TCP SYNs, `--syn`) out of a veth at full rate from
    /// an XDP program (`BPF_F_TEST_XDP_LIVE_FRAMES`), over many source
    /// ports; prints the frames sent and their rate.
    Pktgen(pktgen::Args),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Targets, used round-robin (e.g. every pod IP, or one VIP).
    #[arg(long, value_delimiter = ',', required = true)]
    to: Vec<SocketAddr>,
    /// Worker threads, each with one request in flight.
    #[arg(long, short = 'c', default_value_t = 1)]
    concurrency: usize,
    /// How long to generate load.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// UDP: a new connected socket per request, as a DNS resolver uses (so
    /// every request is a new flow); otherwise one unconnected socket per
    /// worker.
    #[arg(long)]
    socket_per_request: bool,
    /// UDP: a new unconnected socket per request that asks every `--to`
    /// address at once, as musl's resolver asks each nameserver (each
    /// answer counts as a request).
    #[arg(long, conflicts_with = "socket_per_request")]
    ask_all: bool,
    /// bench-connect: TCP sockets instead of UDP, non-blocking: connect()
    /// runs the hook and sends the SYN, close() aborts the attempt.
    #[arg(long, conflicts_with = "sendto")]
    tcp: bool,
    /// bench-connect: one unconnected UDP socket per worker, a sendto() of
    /// one byte to each next address instead of socket+connect+close.
    #[arg(long)]
    sendto: bool,
}

#[derive(Default, Serialize)]
struct Report {
    /// Backend id -> replies.
    replies: BTreeMap<String, u32>,
    /// Error kind -> count.
    errors: BTreeMap<String, u32>,
    /// What getpeername() (TCP) or recvfrom() (UDP) said -> count.
    peers: BTreeMap<String, u32>,
    elapsed_ms: u128,
    /// `udp-push`: the pushes sent (absent for the other clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent: Option<u32>,
}

impl Report {
    /// Counts `e` by its `io::ErrorKind`, or as `ShortReply`.
    fn error(&mut self, e: &io::Error) {
        let kind = if e.get_ref().is_some_and(|inner| inner.is::<ShortReply>()) {
            "ShortReply".to_owned()
        } else {
            format!("{:?}", e.kind())
        };
        *self.errors.entry(kind).or_default() += 1;
    }
}

/// A reply that arrived but not at the length asked for (a truncated
/// download, a large datagram answered short): counted apart from the
/// `io::ErrorKind`s so a test can tell it from a lost reply.
#[derive(Debug)]
struct ShortReply;

impl fmt::Display for ShortReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("reply of the wrong length")
    }
}

impl std::error::Error for ShortReply {}

fn short_reply() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, ShortReply)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(cg) = &cli.cgroup {
        fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .with_context(|| format!("joining cgroup {}", cg.display()))?;
    }
    if let Some(ns) = &cli.netns {
        let f =
            fs::File::open(format!("/run/netns/{ns}")).with_context(|| format!("netns {ns}"))?;
        // SAFETY: valid fd; still single-threaded, so the whole process moves.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns {ns}: {}", io::Error::last_os_error());
        }
    }
    match cli.cmd {
        Cmd::Serve { id, tcp, udp } => serve(&id, &tcp, &udp),
        Cmd::Tcp {
            to,
            n,
            from,
            size,
            download,
            half_close_wait,
        } => print(tcp(to, n, &tcp_ask(from, size, download, half_close_wait)?)),
        Cmd::Udp {
            to,
            n,
            connected,
            from,
            size,
            sport,
            pmtu,
        } => {
            let line = if size > 0 {
                padded(size)
            } else {
                ask(from).to_vec()
            };
            let socket = UdpClient {
                to,
                connected,
                sport,
                pmtu,
            };
            print(udp(&socket, n, &line, size > 0)?)
        }
        Cmd::UdpPush {
            to,
            seconds,
            interval_ms,
            connected,
        } => print(udp_push(to, seconds, interval_ms, connected)?),
        Cmd::Hold { to } => hold(to),
        Cmd::HoldUdp { to } => hold_udp(to),
        Cmd::Churn { to } => print(churn(to)?),
        Cmd::BenchTcp(a) => print_json(&bench(&a, cli.netns.is_some(), Proto::Tcp)?),
        Cmd::BenchUdp(a) => print_json(&bench(&a, cli.netns.is_some(), Proto::Udp)?),
        Cmd::BenchConnect(a) => print_json(&bench_connect(&a, cli.netns.is_some())?),
        Cmd::Pktgen(a) => print_json(&pktgen::run(&a, cli.netns.is_some())?),
        Cmd::SoakClient(a) => {
            if cli.netns.is_none() {
                bail!("refusing to generate load from the root netns: pass --netns");
            }
            soak::run(&a)
        }
    }
}

fn print(r: Report) -> anyhow::Result<()> {
    print_json(&r)
}

fn print_json(r: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(r)?);
    Ok(())
}

fn serve(id: &str, tcp: &[u16], udp: &[u16]) -> anyhow::Result<()> {
    let reply = format!("{id}\n");
    for &port in tcp {
        // `::` takes both families (bindv6only is 0): IPv4 clients arrive
        // v4-mapped.
        let l = TcpListener::bind(("::", port)).with_context(|| format!("tcp {port}"))?;
        let pool = Arc::new(AcceptPool {
            listener: l,
            reply: reply.clone(),
            idle: AtomicUsize::new(0),
        });
        for _ in 0..ACCEPTORS {
            pool.idle.fetch_add(1, Ordering::SeqCst);
            let pool = pool.clone();
            std::thread::spawn(move || pool.run());
        }
    }
    for &port in udp {
        let s = UdpSocket::bind(("::", port)).with_context(|| format!("udp {port}"))?;
        let mut port = UdpPort::new(id);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; UDP_MAX];
            let mut reply = Vec::with_capacity(UDP_MAX);
            while let Ok((len, from)) = s.recv_from(&mut buf) {
                if port.answer(&buf[..len], from.ip(), &mut reply) {
                    let _ = s.send_to(&reply, from);
                }
            }
        });
    }
    println!("ready");
    io::stdout().flush()?;
    // Serve until killed. Waiting for the first acceptors instead would end
    // the process (and close the listener) once a burst had replaced them.
    loop {
        std::thread::park();
    }
}

/// The largest datagram either side receives whole: a UDP payload can be
/// at most 65535 - 8 bytes.
const UDP_MAX: usize = 65535;

/// A `?` datagram longer than this gets a reply as long as itself.
const UDP_PLAIN_MAX: usize = 512;

/// One UDP port's server: its replies, and the `push` datagrams it has
/// received since the last `pushed?` (kept per port, as a test asks the
/// port it pushed to).
struct UdpPort {
    id: String,
    pushes: u64,
    pushers: BTreeSet<IpAddr>,
}

impl UdpPort {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            pushes: 0,
            pushers: BTreeSet::new(),
        }
    }

    /// Writes the reply to `req` from `from` into `out`; false when there is
    /// none (`push`).
    fn answer(&mut self, req: &[u8], from: IpAddr, out: &mut Vec<u8>) -> bool {
        out.clear();
        match req.trim_ascii() {
            b"from?" => out.extend_from_slice(seen_from(&self.id, from).as_bytes()),
            b"push" => {
                self.pushes += 1;
                self.pushers.insert(from.to_canonical());
                return false;
            }
            b"pushed?" => out.extend_from_slice(self.pushed().as_bytes()),
            token @ [b'#', ..] => {
                out.extend_from_slice(self.id.as_bytes());
                out.push(b' ');
                out.extend_from_slice(token);
                out.push(b'\n');
            }
            [b'?', ..] if req.len() > UDP_PLAIN_MAX => {
                // `<id>\n` padded to the request's length (never cut: an id
                // too long for it makes a reply of the wrong length).
                out.extend_from_slice(self.id.as_bytes());
                out.push(b'\n');
                if out.len() < req.len() {
                    out.resize(req.len(), b'x');
                }
            }
            _ => {
                out.extend_from_slice(self.id.as_bytes());
                out.push(b'\n');
            }
        }
        true
    }

    /// The answer to `pushed?`; forgets the pushes, so that the next
    /// question covers only what came after this one.
    fn pushed(&mut self) -> String {
        let from: Vec<String> = self.pushers.iter().map(IpAddr::to_string).collect();
        let (id, pushes) = (&self.id, self.pushes);
        let line = format!("{id} pushed {pushes} from {}\n", from.join(","));
        self.pushes = 0;
        self.pushers.clear();
        line
    }
}

/// Idle acceptors kept per TCP port; more start on demand, extras exit.
const ACCEPTORS: usize = 4;

/// A self-sizing pool of threads that each accept() and then serve that
/// connection inline (no thread spawn per short connection). Whoever accepts
/// while being the last idle acceptor starts another, so long-lived
/// connections (`hold`) never starve new ones.
struct AcceptPool {
    listener: TcpListener,
    reply: String,
    /// Threads blocked in (or about to enter) accept().
    idle: AtomicUsize,
}

impl AcceptPool {
    /// Runs with `idle` already counting this thread.
    fn run(self: Arc<Self>) {
        loop {
            let conn = self.listener.accept();
            if self.idle.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.idle.fetch_add(1, Ordering::SeqCst);
                let pool = self.clone();
                std::thread::spawn(move || pool.run());
            }
            if let Ok((conn, peer)) = conn {
                answer_lines(conn, self.reply.as_bytes(), peer.ip());
            }
            if self.idle.fetch_add(1, Ordering::SeqCst) >= ACCEPTORS {
                self.idle.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// What a TCP request line asks for.
enum TcpRequest {
    /// The id line.
    Id,
    /// `from?`: the id and the client address.
    From,
    /// `bytes N`: a download of N bytes.
    Bytes(u64),
    /// `later S`: the id line after S seconds, then close.
    Later(Duration),
}

impl TcpRequest {
    /// Anything unrecognised (a padded `?`, a bad number) asks for the id.
    fn parse(line: &str) -> Self {
        if line == "from?" {
            return Self::From;
        }
        if let Some(n) = line.strip_prefix("bytes ").and_then(|n| n.parse().ok()) {
            return Self::Bytes(n);
        }
        let later = line
            .strip_prefix("later ")
            .and_then(|s| s.parse().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        later.map_or(Self::Id, Self::Later)
    }
}

fn answer_lines(conn: TcpStream, reply: &[u8], peer: IpAddr) {
    let mut writer = match conn.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let id = String::from_utf8_lossy(reply).trim().to_owned();
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let sent = match TcpRequest::parse(&line) {
            TcpRequest::Id => writer.write_all(reply),
            TcpRequest::From => writer.write_all(seen_from(&id, peer).as_bytes()),
            TcpRequest::Bytes(n) => send_bytes(&mut writer, &id, n),
            TcpRequest::Later(wait) => {
                // This acceptor thread sleeps; the pool has already started
                // another if it was the last idle one.
                std::thread::sleep(wait);
                let _ = writer.write_all(reply);
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// `x` padding, written a slice at a time: a download of any size needs no
/// buffer of its own.
static PADDING: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// The answer to `bytes n`: `<id> `, n bytes of `x`, a newline. write_all
/// blocks while the client (or the path) is slow; the thread is this
/// connection's alone.
fn send_bytes(conn: &mut TcpStream, id: &str, n: u64) -> io::Result<()> {
    // The last, short segment must not wait (Nagle) for the ACK of the
    // others, which a delayed ACK holds back.
    conn.set_nodelay(true)?;
    let mut out = io::BufWriter::with_capacity(PADDING.len(), conn);
    out.write_all(id.as_bytes())?;
    out.write_all(b" ")?;
    let mut left = n;
    while left > 0 {
        let chunk = left.min(PADDING.len() as u64);
        out.write_all(&PADDING[..chunk as usize])?;
        left -= chunk;
    }
    out.write_all(b"\n")?;
    out.flush()
}

/// The answer to `from?`: the id and the client address this backend saw
/// (an IPv4 client of a `::` socket arrives v4-mapped).
fn seen_from(id: &str, peer: IpAddr) -> String {
    format!("{id} from {}\n", peer.to_canonical())
}

/// The request line: `?`, or `from?` to learn the address the backend saw.
fn ask(from: bool) -> &'static [u8] {
    if from { b"from?\n" } else { b"?\n" }
}

/// One request on a connected stream; returns the backend id.
fn request(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    ask_with(stream, reader, ask(false))
}

/// Request `line` on a connected stream; returns the reply.
fn ask_with(
    stream: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    line: &[u8],
) -> io::Result<String> {
    stream.write_all(line)?;
    read_reply(reader)
}

/// The next reply line, trimmed.
fn read_reply(reader: &mut BufReader<TcpStream>) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim().to_owned())
}

/// What each `tcp` connection asks.
enum TcpAsk {
    /// One line (`?`, `from?`, or a padded `?`), one reply line.
    Line(Vec<u8>),
    /// `bytes N`: a reply of `<id> ` and N bytes.
    Download(u64),
    /// `later S`, then a half-close; the reply comes S seconds later.
    Later(Duration),
}

/// How much longer than the backend's wait a half-closed client waits for
/// its reply: a late reply is then not mistaken for a lost one.
const LATER_SLACK: Duration = Duration::from_secs(10);

impl TcpAsk {
    fn read_timeout(&self) -> Duration {
        match self {
            Self::Later(wait) => *wait + LATER_SLACK + TIMEOUT,
            _ => TIMEOUT,
        }
    }
}

/// The request of `lbt tcp` from its flags (clap keeps them exclusive).
fn tcp_ask(
    from: bool,
    size: usize,
    download: Option<u64>,
    half_close_wait: Option<f64>,
) -> anyhow::Result<TcpAsk> {
    if let Some(secs) = half_close_wait {
        let wait = Duration::try_from_secs_f64(secs).context("--half-close-wait")?;
        return Ok(TcpAsk::Later(wait));
    }
    if let Some(n) = download {
        return Ok(TcpAsk::Download(n));
    }
    let mut line = ask(from).to_vec();
    if size > line.len() && !from {
        // `?` and padding, then the newline.
        line.truncate(1);
        line.resize(size - 1, b'x');
        line.push(b'\n');
    }
    Ok(TcpAsk::Line(line))
}

/// `bytes n` on a connected stream: reads up to the newline, checks that
/// `<id> ` is followed by exactly n bytes, and returns the id. A reply cut
/// short (EOF before the newline) or too long is a `ShortReply`.
fn download(
    stream: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    n: u64,
) -> io::Result<String> {
    stream.write_all(format!("bytes {n}\n").as_bytes())?;
    let mut reply = Vec::new();
    if reader.read_until(b'\n', &mut reply)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let body = reply.strip_suffix(b"\n").ok_or_else(short_reply)?;
    let space = body
        .iter()
        .position(|&b| b == b' ')
        .ok_or_else(short_reply)?;
    if (body.len() - space - 1) as u64 != n {
        return Err(short_reply());
    }
    Ok(String::from_utf8_lossy(&body[..space]).into_owned())
}

/// `later` on a connected stream: sends it, shuts down the write side, and
/// waits for the reply, which the backend sends only after `wait`.
fn later(
    stream: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    wait: Duration,
) -> io::Result<String> {
    stream.write_all(format!("later {}\n", wait.as_secs_f64()).as_bytes())?;
    stream.shutdown(Shutdown::Write)?;
    read_reply(reader)
}

fn tcp_once(to: SocketAddr, r: &mut Report, ask: &TcpAsk) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(ask.read_timeout()))?;
    // A large request whose segments stop getting through (a lost
    // "fragmentation needed") fails as a stalled reply does, not hangs.
    s.set_write_timeout(Some(TIMEOUT))?;
    let peer = s.peer_addr()?;
    *r.peers.entry(peer.to_string()).or_default() += 1;
    let mut reader = BufReader::new(s.try_clone()?);
    let id = match ask {
        TcpAsk::Line(line) => ask_with(&mut s, &mut reader, line)?,
        TcpAsk::Download(n) => download(&mut s, &mut reader, *n)?,
        TcpAsk::Later(wait) => later(&mut s, &mut reader, *wait)?,
    };
    *r.replies.entry(id).or_default() += 1;
    Ok(())
}

fn tcp(to: SocketAddr, n: u32, ask: &TcpAsk) -> Report {
    let start = Instant::now();
    let mut r = Report::default();
    for _ in 0..n {
        if let Err(e) = tcp_once(to, &mut r, ask) {
            r.error(&e);
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    r
}

/// `--size` of `lbt udp`: 0, or more than the 512 bytes below which the
/// backend answers with the plain id (and at most a UDP payload over IPv6).
fn udp_size(s: &str) -> Result<usize, String> {
    let size: usize = s.parse().map_err(|e| format!("{e}"))?;
    if size == 0 || (UDP_PLAIN_MAX + 1..=65527).contains(&size) {
        Ok(size)
    } else {
        Err(format!("0, or {} to 65527", UDP_PLAIN_MAX + 1))
    }
}

/// A `?` padded with `x` to `size` bytes.
fn padded(size: usize) -> Vec<u8> {
    let mut line = vec![b'x'; size];
    if let Some(first) = line.first_mut() {
        *first = b'?';
    }
    line
}

/// What `lbt udp` asks of its socket.
struct UdpClient {
    to: SocketAddr,
    connected: bool,
    sport: u16,
    pmtu: Option<Pmtu>,
}

/// Path-MTU discovery of a UDP socket (`IP_PMTUDISC_*`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Pmtu {
    Dont,
    Want,
    Do,
}

/// N requests of `line`; with `sized`, a reply must be as long as the
/// request (else `ShortReply`). The id is the reply's first line.
fn udp(c: &UdpClient, n: u32, line: &[u8], sized: bool) -> anyhow::Result<Report> {
    let start = Instant::now();
    let mut r = Report::default();
    let (to, connected) = (c.to, c.connected);
    let Some(s) = udp_client(to, connected, c.sport, &mut r)? else {
        return Ok(r);
    };
    if let Some(pmtu) = c.pmtu {
        let mode: libc::c_int = match pmtu {
            Pmtu::Dont => libc::IP_PMTUDISC_DONT,
            Pmtu::Want => libc::IP_PMTUDISC_WANT,
            Pmtu::Do => libc::IP_PMTUDISC_DO,
        };
        let (level, name) = if to.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
        };
        sock::setsockopt(s.as_raw_fd(), level, name, &mode)?;
    }
    let mut buf = vec![0u8; UDP_MAX];
    let line = line.trim_ascii_end();
    for _ in 0..n {
        let sent = if connected {
            s.send(line)
        } else {
            s.send_to(line, to)
        };
        if let Err(e) = sent {
            r.error(&e);
            continue;
        }
        match s.recv_from(&mut buf) {
            Ok((len, from)) => {
                *r.peers.entry(from.to_string()).or_default() += 1;
                if sized && len != line.len() {
                    r.error(&short_reply());
                    continue;
                }
                *r.replies.entry(first_line(&buf[..len])).or_default() += 1;
            }
            Err(e) => r.error(&e),
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    Ok(r)
}

/// A UDP socket for `to`, connected if `connected` (its getpeername()
/// counted in `r`); `None` with the error counted if connect() fails.
fn udp_client(
    to: SocketAddr,
    connected: bool,
    sport: u16,
    r: &mut Report,
) -> anyhow::Result<Option<UdpSocket>> {
    let mut local = sock::any_port_of_family(&to);
    local.set_port(sport);
    let s = UdpSocket::bind(local)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    if connected {
        if let Err(e) = s.connect(to) {
            r.error(&e);
            return Ok(None);
        }
        *r.peers
            .entry(format!("getpeername {}", s.peer_addr()?))
            .or_default() += 1;
    }
    Ok(Some(s))
}

/// A datagram's first line, trimmed: the whole of a short reply, the id of
/// a padded one.
fn first_line(reply: &[u8]) -> String {
    let line = reply.split(|&b| b == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line).trim().to_owned()
}

/// `udp-push`: `push` every `interval_ms` for `seconds` (the first at
/// once), then `pushed?` and one reply, all from one socket, so the
/// backend's count says how many one-way datagrams of this flow arrived.
fn udp_push(
    to: SocketAddr,
    seconds: f64,
    interval_ms: u64,
    connected: bool,
) -> anyhow::Result<Report> {
    let run = Duration::try_from_secs_f64(seconds).context("--seconds")?;
    if interval_ms == 0 {
        bail!("--interval-ms must be positive");
    }
    let interval = Duration::from_millis(interval_ms);
    let start = Instant::now();
    let mut r = Report::default();
    let Some(s) = udp_client(to, connected, 0, &mut r)? else {
        return Ok(r);
    };
    let send = |msg: &[u8]| {
        if connected {
            s.send(msg)
        } else {
            s.send_to(msg, to)
        }
    };
    let (end, mut next, mut sent) = (start + run, start, 0);
    while next < end {
        match send(b"push") {
            Ok(_) => sent += 1,
            Err(e) => r.error(&e),
        }
        // On a fixed schedule: a slow send() does not thin out the rest.
        next += interval;
        if let Some(wait) = next.min(end).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    r.sent = Some(sent);
    let mut buf = vec![0u8; UDP_MAX];
    match send(b"pushed?").and_then(|_| s.recv_from(&mut buf)) {
        Ok((len, from)) => {
            *r.replies.entry(first_line(&buf[..len])).or_default() += 1;
            *r.peers.entry(from.to_string()).or_default() += 1;
        }
        Err(e) => r.error(&e),
    }
    r.elapsed_ms = start.elapsed().as_millis();
    Ok(r)
}

fn hold(to: SocketAddr) -> anyhow::Result<()> {
    let mut s = TcpStream::connect_timeout(&to, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(s.try_clone()?);
    println!("connected {}", s.peer_addr()?);
    for line in io::stdin().lines() {
        // "peer" asks getpeername() again; any other line is a request.
        if line? == "peer" {
            match s.peer_addr() {
                Ok(peer) => println!("peer {peer}"),
                Err(e) => println!("error {:?}", e.kind()),
            }
        } else {
            match request(&mut s, &mut reader) {
                Ok(id) => println!("reply {id}"),
                Err(e) => println!("error {:?}", e.kind()),
            }
        }
        io::stdout().flush()?;
    }
    Ok(())
}

/// A UDP socket connected to `to`; prints `connected <getpeername>`, or
/// `error <errno>` if connect() fails.
fn udp_connect(to: SocketAddr) -> anyhow::Result<Option<UdpSocket>> {
    let s = UdpSocket::bind(sock::any_port_of_family(&to))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    match s.connect(to).and_then(|()| s.peer_addr()) {
        Ok(peer) => {
            println!("connected {peer}");
            Ok(Some(s))
        }
        Err(e) => {
            println!("error {}", errno(&e));
            Ok(None)
        }
    }
}

fn errno(e: &io::Error) -> i32 {
    // A timed-out recv() on a socket with SO_RCVTIMEO is EAGAIN.
    e.raw_os_error().unwrap_or(0)
}

/// `hold-udp`: a request is send() then recv(). It prints `reply <id>`, or
/// `error <errno of the call that failed> <SO_ERROR pending after it>`, so
/// that an error the kernel queued on the socket (e.g. ECONNABORTED from a
/// socket destroy) shows even when send() fails first for another reason.
fn hold_udp(to: SocketAddr) -> anyhow::Result<()> {
    let mut s = udp_connect(to)?;
    io::stdout().flush()?;
    let mut buf = [0u8; 512];
    for line in io::stdin().lines() {
        let line = line?;
        if line == "reconnect" {
            s = udp_connect(to)?;
        } else if let Some(other) = line.strip_prefix("connect ") {
            // The same socket, connected elsewhere.
            let other: SocketAddr = other.parse()?;
            match s
                .as_ref()
                .map(|sock| sock.connect(other).and_then(|()| sock.peer_addr()))
            {
                Some(Ok(peer)) => println!("connected {peer}"),
                Some(Err(e)) => println!("error {}", errno(&e)),
                None => println!("error {}", libc::ENOTCONN),
            }
        } else {
            match &s {
                None => println!("error {} 0", libc::ENOTCONN),
                Some(sock) => match sock.send(b"?").and_then(|_| sock.recv(&mut buf)) {
                    Ok(len) => println!("reply {}", String::from_utf8_lossy(&buf[..len]).trim()),
                    Err(e) => {
                        let pending = sock.take_error()?.map_or(0, |p| errno(&p));
                        println!("error {} {pending}", errno(&e));
                    }
                },
            }
        }
        io::stdout().flush()?;
    }
    Ok(())
}

fn churn(to: SocketAddr) -> anyhow::Result<Report> {
    let start = Instant::now();
    // A reader thread notices stdin closing; the loop checks it between connects.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = io::stdin().lines().count();
        let _ = tx.send(());
    });
    let mut r = Report::default();
    let ask = TcpAsk::Line(ask(false).to_vec());
    while rx.try_recv().is_err() {
        if let Err(e) = tcp_once(to, &mut r, &ask) {
            r.error(&e);
        }
    }
    r.elapsed_ms = start.elapsed().as_millis();
    Ok(r)
}

// ---- Benchmarks -------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    Tcp,
    Udp,
}

/// A UDP reply slower than this counts as failed.
const UDP_TIMEOUT: Duration = Duration::from_millis(200);

/// One worker's tally.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: BTreeMap<String, u64>,
    /// Backend id (raw reply, newline trimmed) -> replies.
    replies: Vec<(Vec<u8>, u64)>,
    /// connect() (TCP) or round-trip (UDP) latency of each success, in ns.
    lat_ns: Vec<u64>,
}

impl Tally {
    fn error(&mut self, e: &io::Error) {
        *self.errors.entry(sock::cause(e)).or_default() += 1;
    }

    fn reply(&mut self, id: &[u8], lat: Duration) {
        self.ok += 1;
        self.lat_ns.push(lat.as_nanos() as u64);
        let id = id.trim_ascii();
        match self.replies.iter_mut().find(|(k, _)| k == id) {
            Some((_, n)) => *n += 1,
            None => self.replies.push((id.to_vec(), 1)),
        }
    }
}

/// The JSON a benchmark prints (`connect_*` for TCP, `rtt_*` for UDP).
#[derive(Serialize)]
struct BenchReport {
    ok: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    seconds: f64,
    rate: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    connect_p50_us: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connect_p99_us: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt_p50_us: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt_p99_us: Option<Option<f64>>,
    replies: BTreeMap<String, u64>,
}

/// How long a benchmark runs, once its arguments are found safe to run.
fn bench_run(a: &BenchArgs, in_netns: bool) -> anyhow::Result<Duration> {
    let loopback = |s: &SocketAddr| match s.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => ip.is_loopback(),
    };
    if !in_netns && !a.to.iter().all(loopback) {
        bail!("refusing to generate load from the root netns: pass --netns");
    }
    let run = Duration::try_from_secs_f64(a.seconds).context("--seconds")?;
    if a.concurrency == 0 || run.is_zero() {
        bail!("--concurrency and --seconds must be positive");
    }
    Ok(run)
}

/// What `bench-connect` measured, in the shape of the other benchmarks'
/// reports (no replies: nothing is sent).
#[derive(Serialize)]
struct ConnectReport {
    /// Sockets created, connected and closed.
    ok: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    seconds: f64,
    rate: f64,
    replies: BTreeMap<String, u64>,
    /// Wall time per socket()+connect()+close(), per worker.
    ns_per_connect: f64,
}

fn bench_connect(a: &BenchArgs, in_netns: bool) -> anyhow::Result<ConnectReport> {
    let run = bench_run(a, in_netns)?;
    let start = Instant::now();
    let deadline = start + run;
    let workers: Vec<_> = (0..a.concurrency)
        .map(|w| {
            let to: Vec<socket2::SockAddr> = a.to.iter().map(|&s| s.into()).collect();
            let (tcp, sendto) = (a.tcp, a.sendto);
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0u64, 0u64);
                let mut i = w;
                let unconnected = sendto.then(|| {
                    let first = to[0].as_socket().expect("an inet address");
                    socket2::Socket::new(
                        socket2::Domain::for_address(first),
                        socket2::Type::DGRAM,
                        None,
                    )
                });
                while Instant::now() < deadline {
                    // A batch between clock reads, so that the clock costs little.
                    for _ in 0..64 {
                        let addr = &to[i % to.len()];
                        i += 1;
                        let domain = socket2::Domain::for_address(
                            addr.as_socket().expect("an inet address"),
                        );
                        let connected = if let Some(s) = &unconnected {
                            s.as_ref()
                                .map_err(|e| io::Error::new(e.kind(), e.to_string()))
                                .and_then(|s| s.send_to(b"?", addr))
                                .map(drop)
                        } else if tcp {
                            socket2::Socket::new(domain, socket2::Type::STREAM, None).and_then(
                                |s| {
                                    s.set_nonblocking(true)?;
                                    match s.connect(addr) {
                                        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                                            Ok(())
                                        }
                                        other => other,
                                    }
                                },
                            )
                        } else {
                            socket2::Socket::new(domain, socket2::Type::DGRAM, None)
                                .and_then(|s| s.connect(addr))
                        };
                        match connected {
                            Ok(()) => ok += 1,
                            Err(_) => failed += 1,
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for w in workers {
        let (o, f) = w.join().map_err(|_| anyhow::anyhow!("worker panicked"))?;
        ok += o;
        failed += f;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(ConnectReport {
        ok,
        failed,
        errors: BTreeMap::new(),
        seconds,
        rate: ok as f64 / seconds,
        replies: BTreeMap::new(),
        ns_per_connect: seconds * 1e9 * a.concurrency as f64 / (ok + failed).max(1) as f64,
    })
}

fn bench(a: &BenchArgs, in_netns: bool, proto: Proto) -> anyhow::Result<BenchReport> {
    let run = bench_run(a, in_netns)?;
    let start = Instant::now();
    let deadline = start + run;
    let fresh = match (a.socket_per_request, a.ask_all) {
        (true, _) => Fresh::Connected,
        (_, true) => Fresh::AskAll,
        _ => Fresh::No,
    };
    let workers: Vec<_> = (0..a.concurrency)
        .map(|w| {
            let to = a.to.clone();
            std::thread::spawn(move || match proto {
                Proto::Tcp => bench_tcp_worker(&to, w, deadline),
                Proto::Udp => bench_udp_worker(&to, w, deadline, fresh),
            })
        })
        .collect();
    let mut all = Tally::default();
    for w in workers {
        let t = w.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
        all.ok += t.ok;
        for (k, n) in t.errors {
            *all.errors.entry(k).or_default() += n;
        }
        for (id, n) in t.replies {
            match all.replies.iter_mut().find(|(k, _)| *k == id) {
                Some((_, m)) => *m += n,
                None => all.replies.push((id, n)),
            }
        }
        all.lat_ns.extend(t.lat_ns);
    }
    let seconds = start.elapsed().as_secs_f64();
    all.lat_ns.sort_unstable();
    let p50 = percentile(&all.lat_ns, 50.0).map(us);
    let p99 = percentile(&all.lat_ns, 99.0).map(us);
    let (tcp, udp) = match proto {
        Proto::Tcp => ((Some(p50), Some(p99)), (None, None)),
        Proto::Udp => ((None, None), (Some(p50), Some(p99))),
    };
    Ok(BenchReport {
        ok: all.ok,
        failed: all.errors.values().sum(),
        errors: all.errors,
        seconds,
        rate: all.ok as f64 / seconds,
        connect_p50_us: tcp.0,
        connect_p99_us: tcp.1,
        rtt_p50_us: udp.0,
        rtt_p99_us: udp.1,
        replies: all
            .replies
            .into_iter()
            .map(|(k, n)| (String::from_utf8_lossy(&k).into_owned(), n))
            .collect(),
    })
}

/// Nanoseconds in µs, in 0.1 µs steps.
fn us(ns: u64) -> f64 {
    (ns as f64 / 100.0).round() / 10.0
}

fn bench_tcp_worker(to: &[SocketAddr], w: usize, deadline: Instant) -> anyhow::Result<Tally> {
    let mut t = Tally::default();
    let mut buf = [0u8; 256];
    let mut k = w;
    while Instant::now() < deadline {
        let addr = &to[k % to.len()];
        k += 1;
        match sock::tcp_once(addr, &mut buf) {
            Ok((len, took)) => t.reply(&buf[..len], took),
            Err(e) => t.error(&e),
        }
    }
    Ok(t)
}

/// Whether each UDP request has a socket of its own, and which.
#[derive(Clone, Copy)]
enum Fresh {
    /// One unconnected socket per worker.
    No,
    /// A connected socket per request (`--socket-per-request`).
    Connected,
    /// An unconnected socket per request, asking every address (`--ask-all`).
    AskAll,
}

fn bench_udp_worker(
    to: &[SocketAddr],
    w: usize,
    deadline: Instant,
    fresh: Fresh,
) -> anyhow::Result<Tally> {
    let mut t = Tally::default();
    let bind = sock::any_port_of_family(&to[0]);
    let udp_socket = || -> io::Result<UdpSocket> {
        let s = UdpSocket::bind(bind)?;
        s.set_read_timeout(Some(UDP_TIMEOUT))?;
        Ok(s)
    };
    let shared = udp_socket()?;
    let mut buf = [0u8; 512];
    let mut k = w;
    while Instant::now() < deadline {
        let addr = &to[k % to.len()];
        k += 1;
        let t0 = Instant::now();
        if let Fresh::AskAll = fresh {
            let asked = udp_socket().and_then(|s| {
                for addr in to {
                    s.send_to(b"?", addr)?;
                }
                Ok(s)
            });
            let s = match asked {
                Ok(s) => s,
                Err(e) => {
                    t.error(&e);
                    continue;
                }
            };
            for _ in to {
                let answer = s.recv_from(&mut buf).and_then(|(len, from)| {
                    if to.contains(&from) {
                        Ok(len)
                    } else {
                        Err(io::Error::other(sock::WrongPeer(from)))
                    }
                });
                match answer {
                    Ok(len) => t.reply(&buf[..len], t0.elapsed()),
                    Err(e) => t.error(&e),
                }
            }
            continue;
        }
        let once = |buf: &mut [u8]| -> io::Result<usize> {
            if let Fresh::Connected = fresh {
                sock::ask_fresh_udp(addr, buf, UDP_TIMEOUT).map(|(len, _)| len)
            } else {
                shared.send_to(b"?", addr)?;
                let (len, from) = shared.recv_from(buf)?;
                sock::check_peer(from, addr)?;
                Ok(len)
            }
        };
        match once(&mut buf) {
            Ok(len) => t.reply(&buf[..len], t0.elapsed()),
            Err(e) => t.error(&e),
        }
    }
    Ok(t)
}
