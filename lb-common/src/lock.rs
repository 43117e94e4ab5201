//! The kernel's `struct bpf_spin_lock`, as a map value field.

/// A `bpf_spin_lock`. The kernel finds it in a map value by this BTF struct
/// name and size (4 bytes), so the name must stay exactly `bpf_spin_lock`.
///
/// Programs take it with `bpf_spin_lock()`; userspace writes the value it
/// guards with `BPF_F_LOCK`, which copies the value in place while holding
/// it. Userspace reads see it as 0 and must write it as 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct bpf_spin_lock {
    pub val: u32,
}
const _: () = assert!(size_of::<bpf_spin_lock>() == 4);

/// The readable name for [`bpf_spin_lock`].
pub type SpinLock = bpf_spin_lock;
