//! Socket-level ClusterIP load balancing at the cgroup sock_addr hooks.
//!
//! `connect4` and `sendmsg4` translate `VIP:port` into a backend once per
//! connect (or per unconnected datagram); `recvmsg4` and `getpeername4` show
//! the application the VIP again. There is no per-packet work.
#![no_std]
#![no_main]

mod maps;
mod sock;

use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};

/// Verdicts of a cgroup sock_addr program.
const ALLOW: i32 = 1;
const DENY: i32 = 0;

#[cgroup_sock_addr(connect4)]
pub fn lb_connect4(ctx: SockAddrContext) -> i32 {
    sock::translate(&ctx)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn lb_sendmsg4(ctx: SockAddrContext) -> i32 {
    sock::translate(&ctx)
}

#[cgroup_sock_addr(recvmsg4)]
pub fn lb_recvmsg4(ctx: SockAddrContext) -> i32 {
    sock::reverse(&ctx)
}

#[cgroup_sock_addr(getpeername4)]
pub fn lb_getpeername4(ctx: SockAddrContext) -> i32 {
    sock::reverse(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
