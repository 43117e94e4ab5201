//! `lbt soak-client`: requests without pause to whatever Services the soak
//! names on stdin, counted per Service, socket kind and phase, reported
//! once a second on stdout (`lb_tests::soak::wire`). Requests are never
//! retried, except a UDP request whose socket the agent destroyed, as an
//! application reconnects then (counted apart).

use std::{
    collections::HashMap,
    io::{self, BufRead as _},
    net::{SocketAddr, UdpSocket},
    sync::{
        Arc, Mutex, PoisonError, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use lb_tests::soak::wire::{
    Answers, Command, Failures, Key, Phase, Proto, Report, Socket, Tally, now_ns,
};

use crate::sock;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Workers making short TCP connections.
    #[arg(long, default_value_t = 2)]
    tcp: usize,
    /// Workers making UDP requests on a new connected socket each.
    #[arg(long, default_value_t = 1)]
    udp_connected: usize,
    /// Workers making UDP requests on one long-lived unconnected socket.
    #[arg(long, default_value_t = 1)]
    udp_unconnected: usize,
}

/// How long a request may take before it counts as timed out.
const TIMEOUT: Duration = sock::TIMEOUT;
/// How often the tally is reported.
const TALLY_EVERY: Duration = Duration::from_secs(1);

/// One Service port the workers send to.
struct Target {
    svc: String,
    proto: Proto,
    to: SocketAddr,
    /// `epoch << 2 | phase code`: one load gives a consistent pair, and a
    /// changed epoch says the phase changed while a request ran.
    phase: AtomicU64,
}

impl Target {
    fn phase(&self) -> (Phase, u64) {
        let v = self.phase.load(Ordering::SeqCst);
        (Phase::from_code(v & 3), v >> 2)
    }

    fn set_phase(&self, phase: Phase) {
        let epoch = self.phase.load(Ordering::SeqCst) >> 2;
        self.phase
            .store((epoch + 1) << 2 | phase.code(), Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Acc {
    answers: HashMap<(Key, String), Answers>,
    failures: HashMap<(Key, String), Failures>,
    reconnects: HashMap<Key, u64>,
    late_replies: u64,
}

impl Acc {
    fn answer(&mut self, key: Key, backend: &str, start: u64, end: u64) {
        let one = Answers {
            key: key.clone(),
            backend: backend.to_owned(),
            n: 1,
            min_end_ns: end,
            max_start_ns: start,
        };
        self.answers
            .entry((key, backend.to_owned()))
            .and_modify(|a| a.merge(&one))
            .or_insert(one);
    }

    fn failure(&mut self, key: Key, cause: String, start: u64, end: u64) {
        let one = Failures {
            key: key.clone(),
            cause: cause.clone(),
            n: 1,
            first_start_ns: start,
            last_end_ns: end,
        };
        self.failures
            .entry((key, cause))
            .and_modify(|f| f.merge(&one))
            .or_insert(one);
    }

    fn take(&mut self) -> Tally {
        let acc = std::mem::take(self);
        Tally {
            answers: acc.answers.into_values().collect(),
            failures: acc.failures.into_values().collect(),
            reconnects: acc.reconnects.into_iter().collect(),
            late_replies: acc.late_replies,
        }
    }
}

struct Shared {
    targets: RwLock<Vec<Arc<Target>>>,
    acc: Mutex<Acc>,
    stop: AtomicBool,
}

impl Shared {
    fn acc(&self) -> std::sync::MutexGuard<'_, Acc> {
        self.acc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `k`-th target (modulo) of this protocol, if any.
    fn target(&self, proto: Proto, k: usize) -> Option<Arc<Target>> {
        let all = self.targets.read().unwrap_or_else(PoisonError::into_inner);
        let n = all.iter().filter(|t| t.proto == proto).count();
        (n > 0).then(|| {
            all.iter()
                .filter(|t| t.proto == proto)
                .nth(k % n)
                .cloned()
                .expect("k % n < n")
        })
    }
}

fn emit(r: &Report) {
    println!(
        "{}",
        serde_json::to_string(r).expect("reports serialize to JSON")
    );
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        targets: RwLock::new(Vec::new()),
        acc: Mutex::new(Acc::default()),
        stop: AtomicBool::new(false),
    });
    let kinds = [
        (Socket::Tcp, args.tcp),
        (Socket::UdpConnected, args.udp_connected),
        (Socket::UdpUnconnected, args.udp_unconnected),
    ];
    let mut workers = Vec::new();
    for (socket, n) in kinds {
        for w in 0..n {
            let shared = shared.clone();
            workers.push(thread::spawn(move || worker(&shared, socket, w)));
        }
    }
    let tallies = {
        let shared = shared.clone();
        thread::spawn(move || {
            while !shared.stop.load(Ordering::SeqCst) {
                thread::sleep(TALLY_EVERY);
                let tally = shared.acc().take();
                emit(&Report::Tally(tally));
            }
        })
    };

    for line in io::stdin().lock().lines() {
        let command: Command = serde_json::from_str(&line?)?;
        let mut targets = shared
            .targets
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match command {
            Command::Add {
                svc,
                proto,
                to,
                phase,
            } => targets.push(Arc::new(Target {
                svc,
                proto,
                to,
                phase: AtomicU64::new(phase.code()),
            })),
            Command::Phase { svc, phase, seq } => {
                for t in targets.iter().filter(|t| t.svc == svc) {
                    t.set_phase(phase);
                }
                emit(&Report::Ack { seq });
            }
            Command::Remove { svc, seq } => {
                targets.retain(|t| t.svc != svc);
                emit(&Report::Ack { seq });
            }
        }
    }
    shared.stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join()
            .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
    }
    tallies
        .join()
        .map_err(|_| anyhow::anyhow!("the tally thread panicked"))?;
    let tally = shared.acc().take();
    emit(&Report::Tally(tally));
    emit(&Report::Done);
    Ok(())
}

/// What one request got.
enum Outcome {
    /// The backend's identity, and how many destroyed sockets the request
    /// reconnected after.
    Reply(String, u32),
    Failed(String),
}

fn worker(shared: &Shared, socket: Socket, w: usize) -> anyhow::Result<()> {
    let unconnected = match socket {
        Socket::UdpUnconnected => {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            Some(s)
        }
        _ => None,
    };
    let mut buf = [0u8; 512];
    let mut token = 0u64;
    let mut k = w;
    while !shared.stop.load(Ordering::SeqCst) {
        let Some(target) = shared.target(socket.proto(), k) else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        k += 1;
        let (phase, epoch) = target.phase();
        let start = now_ns();
        let outcome = match (&unconnected, socket) {
            (Some(s), _) => {
                token += 1;
                ask_unconnected(s, &target.to, token, &mut buf, shared)
            }
            (None, Socket::Tcp) => match sock::tcp_once(&target.to, &mut buf) {
                Ok((len, _)) => identity(&buf[..len], 0),
                Err(e) => Outcome::Failed(sock::cause(&e)),
            },
            (None, _) => match sock::ask_fresh_udp(&target.to, &mut buf, TIMEOUT) {
                Ok((len, reconnected)) => identity(&buf[..len], reconnected),
                Err(e) => Outcome::Failed(sock::cause(&e)),
            },
        };
        let end = now_ns();
        let moved_on = target.phase().1 != epoch;
        let key = Key {
            svc: target.svc.clone(),
            socket,
            phase: Phase::of_request(phase, moved_on),
        };
        let mut acc = shared.acc();
        match outcome {
            Outcome::Reply(id, reconnected) => {
                if reconnected > 0 {
                    *acc.reconnects.entry(key.clone()).or_default() += 1;
                }
                acc.answer(key, &id, start, end);
            }
            Outcome::Failed(why) => acc.failure(key, why, start, end),
        }
    }
    Ok(())
}

/// The identity in a reply line (`<id>` or `<id> <token>`).
fn identity(reply: &[u8], reconnected: u32) -> Outcome {
    let text = String::from_utf8_lossy(reply);
    match text.split_whitespace().next() {
        Some(id) => Outcome::Reply(id.to_owned(), reconnected),
        None => Outcome::Failed("BadReply".into()),
    }
}

/// `sendto` a token, then reads until the reply carrying it arrives:
/// replies to earlier requests that timed out are skipped and counted.
/// The reply must come from the address the request went to (the
/// `recvmsg4` program puts the Service's address back).
fn ask_unconnected(
    s: &UdpSocket,
    to: &SocketAddr,
    token: u64,
    buf: &mut [u8],
    shared: &Shared,
) -> Outcome {
    let want = format!("#{token}");
    if let Err(e) = s.send_to(want.as_bytes(), to) {
        return Outcome::Failed(sock::cause(&e));
    }
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Outcome::Failed("TimedOut".into());
        }
        if let Err(e) = s.set_read_timeout(Some(left)) {
            return Outcome::Failed(sock::cause(&e));
        }
        let (len, from) = match s.recv_from(buf) {
            Ok(r) => r,
            Err(e) => return Outcome::Failed(sock::cause(&e)),
        };
        let text = String::from_utf8_lossy(&buf[..len]);
        let mut words = text.split_whitespace();
        let (id, got) = (words.next(), words.next());
        if got != Some(want.as_str()) {
            shared.acc().late_replies += 1;
            continue;
        }
        if from != *to {
            return Outcome::Failed(sock::cause(&io::Error::other(sock::WrongPeer(from))));
        }
        return match id {
            Some(id) => Outcome::Reply(id.to_owned(), 0),
            None => Outcome::Failed("BadReply".into()),
        };
    }
}
