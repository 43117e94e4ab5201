//! The two XDP programs, assembled here (see `super::bpf` for why not an
//! ELF object): the generator's, which makes flow `i` of its frame and
//! returns `XDP_TX`, and the counter's, which counts and drops UDP and
//! passes the rest (so ARP and neighbour discovery still work).

use super::{
    bpf::Insn,
    frame::{BALANCE, BASE_PORT, Frame},
};

pub const XDP_DROP: i32 = 1;
pub const XDP_PASS: i32 = 2;
pub const XDP_TX: i32 = 3;

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;
const R10: u8 = 10;

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

const fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
const fn mov(dst: u8, src: u8) -> Insn {
    insn(0xbf, dst, src, 0, 0)
}
const fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(0x07, dst, 0, 0, imm)
}
const fn sub(dst: u8, src: u8) -> Insn {
    insn(0x1f, dst, src, 0, 0)
}
const fn and_imm(dst: u8, imm: i32) -> Insn {
    insn(0x57, dst, 0, 0, imm)
}
/// Low 16 bits to network byte order (`be16`).
const fn be16(dst: u8) -> Insn {
    insn(0xdc, dst, 0, 0, 16)
}
const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
const fn ldx_h(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x69, dst, src, off, 0)
}
const fn ldx_b(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x71, dst, src, off, 0)
}
const fn ldx_dw(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x79, dst, src, off, 0)
}
const fn stx_h(dst: u8, off: i16, src: u8) -> Insn {
    insn(0x6b, dst, src, off, 0)
}
const fn stx_dw(dst: u8, off: i16, src: u8) -> Insn {
    insn(0x7b, dst, src, off, 0)
}
const fn st_w(dst: u8, off: i16, imm: i32) -> Insn {
    insn(0x62, dst, 0, off, imm)
}
const fn st_h(dst: u8, off: i16, imm: i32) -> Insn {
    insn(0x6a, dst, 0, off, imm)
}
/// `if dst > src goto +off` (unsigned).
const fn jgt(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x2d, dst, src, off, 0)
}
const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x15, dst, 0, off, imm)
}
const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
const fn ja(off: i16) -> Insn {
    insn(0x05, 0, 0, off, 0)
}
const fn call(helper: i32) -> Insn {
    insn(0x85, 0, 0, 0, helper)
}
const fn exit() -> Insn {
    insn(0x95, 0, 0, 0, 0)
}
/// `dst = map` (`BPF_LD_IMM64` with `BPF_PSEUDO_MAP_FD`): two slots.
const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [insn(0x18, dst, 1, 0, fd), insn(0, 0, 0, 0, 0)]
}

const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_GET_PRANDOM_U32: i32 = 7;

/// The generator: the template's headers written afresh, then flow
/// `i = random & (flows - 1)` of `frame` (source port and balancing word,
/// see `super::frame`), sent back out (`XDP_TX`). `flows` is a power of
/// two up to `frame::MAX_FLOWS`.
///
/// Why rewrite the headers every run: live frames reuse their pages
/// without copying the template again, and a veth peer's stack forwards a
/// frame in its page, rewriting MACs, TTL, addresses and checksums; the
/// page's next frame would carry them.
pub(super) fn generator(frame: &Frame, flows: u32) -> Vec<Insn> {
    assert!(
        flows.is_power_of_two() && flows <= super::frame::MAX_FLOWS,
        "flows {flows}"
    );
    let head = frame.word_at + 2;
    let mut body = Vec::new();
    for (i, chunk) in frame.bytes[..head].chunks(4).enumerate() {
        let off = (i * 4) as i16;
        body.push(match *chunk {
            [a, b, c, d] => st_w(R2, off, i32::from_le_bytes([a, b, c, d])),
            [a, b] => st_h(R2, off, i32::from(u16::from_le_bytes([a, b]))),
            _ => unreachable!("headers and the word are whole 16-bit words"),
        });
    }
    body.extend([
        mov(R4, R0),
        add_imm(R4, i32::from(BASE_PORT)),
        be16(R4),
        stx_h(R2, frame.sport_at as i16, R4),
        mov_imm(R5, i32::from(BALANCE)),
        sub(R5, R0),
        be16(R5),
        stx_h(R2, frame.word_at as i16, R5),
    ]);
    let mut p = vec![
        mov(R6, R1),
        call(BPF_FUNC_GET_PRANDOM_U32),
        and_imm(R0, (flows - 1) as i32),
        ldx_w(R2, R6, 0), // data
        ldx_w(R3, R6, 4), // data_end
        mov(R4, R2),
        add_imm(R4, head as i32),
        // The verifier's bounds check: past the body, to `tx`.
        jgt(R4, R3, body.len() as i16),
    ];
    p.extend(body);
    // tx:
    p.extend([mov_imm(R0, XDP_TX), exit()]);
    p
}

/// The counter: adds one to `map`'s (a per-CPU array of one `u64`)
/// entry for every IPv4 or IPv6 UDP frame and drops it; passes the rest.
pub(super) fn counter(map: i32) -> Vec<Insn> {
    let [map_lo, map_hi] = ld_map_fd(R1, map);
    vec![
        ldx_w(R2, R1, 0), // data
        ldx_w(R3, R1, 4), // data_end
        mov(R4, R2),
        add_imm(R4, 24),
        jgt(R4, R3, 19),         // shorter than an IPv4 header's protocol: to `pass`
        ldx_h(R4, R2, 12),       // the ethertype, as a little-endian load sees it
        jeq_imm(R4, 0x0008, 3),  // IPv4: to `v4`
        jne_imm(R4, 0xdd86, 16), // not IPv6 either: to `pass`
        ldx_b(R4, R2, 14 + 6),   // IPv6 next header
        ja(1),                   // to `check`
        ldx_b(R4, R2, 14 + 9),   // v4: IPv4 protocol
        jne_imm(R4, 17, 12),     // check: not UDP: to `pass`
        st_w(R10, -4, 0),        // key 0
        mov(R2, R10),
        add_imm(R2, -4),
        map_lo,
        map_hi,
        call(BPF_FUNC_MAP_LOOKUP_ELEM),
        jeq_imm(R0, 0, 3), // to `drop`
        ldx_dw(R1, R0, 0),
        add_imm(R1, 1),
        stx_dw(R0, 0, R1), // per CPU: no other writer
        // drop:
        mov_imm(R0, XDP_DROP),
        exit(),
        // pass:
        mov_imm(R0, XDP_PASS),
        exit(),
    ]
}
