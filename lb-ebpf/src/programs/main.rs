//! The eBPF programs: one thin file per hook family over the `lb_ebpf`
//! library: socket hooks, tc and XDP.
#![no_std]
#![no_main]

mod iter;
mod sock;
mod tc;
mod xdp;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
