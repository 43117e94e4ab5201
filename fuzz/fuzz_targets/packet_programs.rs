//! Arbitrary frames, in sequences, through the per-packet programs (tc
//! ingress and egress, their twins for devices without a link-layer
//! header, XDP) with `BPF_PROG_TEST_RUN`, over maps filled as the agent
//! fills them and flows of every kind (`lb_fuzz::packet_world`). After
//! each frame the invariants of `lb_fuzz::packet_check` hold: the verdict
//! is the program's, a frame not ours passes unchanged and touches no
//! flow, and no entry names an address the agent did not program.
//!
//! Input: `lb_fuzz::packet_frame` (raw frames, as the corpus seeds carry
//! the tc tests' frames, or structured ones). Every input starts from the
//! same flows; the corpus seeds are written by the target itself (see
//! `init`). Needs root (CAP_BPF, CAP_NET_ADMIN); without it the first
//! input fails.

#![no_main]

use std::{cell::RefCell, time::Instant};

use lb_fuzz::{packet_check::check, packet_frame::decode, packet_seeds, packet_world::World};
use libfuzzer_sys::fuzz_target;

/// Flows made at the start expire (a SYN's after 60 s): made again this
/// often, so that inputs keep meeting live ones.
const REMAKE_SECONDS: u64 = 30;

thread_local! {
    static WORLD: RefCell<Option<(World, Instant)>> = const { RefCell::new(None) };
}

fuzz_target!(
    init: {
        // `LB_FUZZ_WRITE_SEEDS=fuzz/corpus/packet_programs` writes the seed
        // corpus (`lb_fuzz::packet_seeds`) there and stops.
        if let Some(dir) = std::env::var_os("LB_FUZZ_WRITE_SEEDS") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).expect("creating the corpus directory");
            let seeds = packet_seeds::seeds();
            for (name, input) in &seeds {
                std::fs::write(dir.join(name), input).expect("writing a seed");
            }
            println!("{} seeds in {}", seeds.len(), dir.display());
            std::process::exit(0);
        }
    },
    |data: &[u8]| {
    WORLD.with_borrow_mut(|slot| {
        let (world, made) = slot.get_or_insert_with(|| (World::new(), Instant::now()));
        if made.elapsed().as_secs() >= REMAKE_SECONDS {
            world.remake();
            *made = Instant::now();
        }
        let mut before = world.start.clone();
        for step in decode(data).iter().filter(|s| World::runnable(s)) {
            // The kernel refuses to run some malformed frames (an IPv6
            // frame shorter than its header, EINVAL): nothing to check.
            let Ok(out) = world.run(step) else {
                continue;
            };
            let after = world.state();
            if let Err(v) = check(step, &out, &before, &after, &world.known) {
                panic!("{}\nstep: {step:02x?}", v.0);
            }
            before = after;
        }
        world.reset(&before);
    });
});
