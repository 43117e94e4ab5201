//! Giving freed memory back to the kernel.
//!
//! A full sync allocates far more than the agent keeps: a (re)list holds
//! every object of a kind at once, and the model keeps a few fields of each.
//! glibc's malloc keeps freed memory mapped, so without this the resident
//! size stays near the initial list's peak (at 10,000 Services x 10
//! endpoints from the apiserver: 128 MiB, of which about 60 MiB is in use).

/// Keeps glibc trimming the heaps as memory is freed. By default it raises
/// its trim threshold after large frees (such as a whole file's text), after
/// which the per-thread heaps of the file parser are never trimmed again.
/// Call before starting threads.
pub fn keep_trimming() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a malloc parameter.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
    }
}

/// Returns freed pages to the kernel; worth it after a burst of frees.
pub fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free memory back.
    unsafe {
        libc::malloc_trim(0);
    }
}
