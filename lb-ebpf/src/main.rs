//! The eBPF programs: one thin file per hook family over the `lb_ebpf`
//! library. Socket hooks today; tc and XDP join them here.
#![no_std]
#![no_main]

mod sock;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
