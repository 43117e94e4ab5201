//! The cgroup sock_addr programs: entry points over `lb_ebpf::sock`, which
//! holds what they do, for both families and v4-mapped addresses.

use aya_ebpf::{macros::cgroup_sock_addr, programs::SockAddrContext};
use lb_ebpf::sock::{self, Call};

#[cgroup_sock_addr(connect4)]
pub(crate) fn lb_connect4(ctx: SockAddrContext) -> i32 {
    sock::translate4(&ctx, Call::Connect)
}

#[cgroup_sock_addr(sendmsg4)]
pub(crate) fn lb_sendmsg4(ctx: SockAddrContext) -> i32 {
    sock::translate4(&ctx, Call::Sendmsg)
}

#[cgroup_sock_addr(recvmsg4)]
pub(crate) fn lb_recvmsg4(ctx: SockAddrContext) -> i32 {
    sock::reverse4(&ctx)
}

#[cgroup_sock_addr(getpeername4)]
pub(crate) fn lb_getpeername4(ctx: SockAddrContext) -> i32 {
    sock::reverse4(&ctx)
}

#[cgroup_sock_addr(connect6)]
pub(crate) fn lb_connect6(ctx: SockAddrContext) -> i32 {
    sock::translate6(&ctx, Call::Connect)
}

#[cgroup_sock_addr(sendmsg6)]
pub(crate) fn lb_sendmsg6(ctx: SockAddrContext) -> i32 {
    sock::translate6(&ctx, Call::Sendmsg)
}

#[cgroup_sock_addr(recvmsg6)]
pub(crate) fn lb_recvmsg6(ctx: SockAddrContext) -> i32 {
    sock::reverse6(&ctx)
}

#[cgroup_sock_addr(getpeername6)]
pub(crate) fn lb_getpeername6(ctx: SockAddrContext) -> i32 {
    sock::reverse6(&ctx)
}
