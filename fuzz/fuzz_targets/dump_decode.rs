//! `lb-agent dump`: any bytes as the raw contents of the five
//! load-balancing maps, decoded as a map read decodes them, put together as
//! the datapath sees them and rendered. Never panics, and:
//! * every frontend entry is listed once, and a live one with every slot
//!   of its revision;
//! * the listing grows with what the maps hold, not with the counts their
//!   states claim (a damaged state cannot make it print 65,535 lines).
//!
//! Input: five sections, in the order frontends, states, slots, members,
//! backends; each a little-endian `u16` entry count `n`, then `n` keys back
//! to back, then `n` values back to back (what a batch lookup fills). The
//! last section present takes whatever bytes are left, so a short input
//! is a map read that decoding refuses.

#![no_main]

use std::collections::BTreeMap;

use aya::Pod;
use lb_agent::{
    datapath::decode::{self, DecodeError},
    dump,
    reconcile::{LbView, SlotView, V4},
};
use lb_common::{
    Backend4, Frontend4Key, Frontend4State, FrontendId, Member, MemberKey, Slot, SlotKey,
};
use libfuzzer_sys::fuzz_target;

/// The next section's keys and values, as a map read returns them.
fn section<'a>(data: &mut &'a [u8], key_size: usize, value_size: usize) -> (&'a [u8], &'a [u8]) {
    let Some((n, rest)) = data.split_first_chunk::<2>() else {
        let rest = std::mem::take(data);
        return (rest, &[]);
    };
    let n = usize::from(u16::from_le_bytes(*n));
    let keys = rest.len().min(n * key_size);
    let values = (rest.len() - keys).min(n * value_size);
    let (k, rest) = rest.split_at(keys);
    let (v, rest) = rest.split_at(values);
    *data = rest;
    (k, v)
}

fn map<K: Pod + Ord, V: Pod>(data: &mut &[u8]) -> Result<BTreeMap<K, V>, DecodeError> {
    let (k, v) = section(data, size_of::<K>(), size_of::<V>());
    Ok(decode::entries::<K, V>(k, v)?.into_iter().collect())
}

fn read(mut data: &[u8]) -> Result<LbView, DecodeError> {
    let data = &mut data;
    let frontends = map::<Frontend4Key, FrontendId>(data)?;
    let (k, v) = section(data, size_of::<u32>(), size_of::<Frontend4State>());
    let mut states = decode::entries::<u32, Frontend4State>(k, v)?;
    decode::in_use(&mut states);
    let slots = map::<SlotKey, Slot>(data)?;
    let members = map::<MemberKey, Member>(data)?;
    let backends = map::<u32, Backend4>(data)?;
    Ok(LbView::of::<V4>(
        &frontends,
        &states.into_iter().collect(),
        &slots,
        &members,
        &backends,
    ))
}

fuzz_target!(|data: &[u8]| {
    let Ok(view) = read(data) else {
        // `dump` reports a map it cannot read; nothing to render.
        return;
    };
    let text = dump::render(&view);
    let [frontends, _, slots, _, _] = view.entries;
    assert_eq!(view.frontends.len(), frontends);
    for fe in &view.frontends {
        if fe.live {
            let shown: usize = fe.slots.iter().map(SlotView::slots).sum();
            assert_eq!(shown, usize::from(fe.count), "{fe:?}");
        } else {
            assert!(fe.slots.is_empty(), "{fe:?}");
        }
    }
    // Two header lines and the totals; per frontend its line and at most
    // one run of missing slots after the last present one; per slot entry
    // its line and at most one run before it.
    let bound = 3 + 2 * frontends + 2 * slots;
    let lines = text.lines().count();
    assert!(
        lines <= bound,
        "{lines} lines from {frontends} frontends and {slots} slots"
    );
});
