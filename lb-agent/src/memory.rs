//! Giving freed memory back to the kernel.
//!
//! A full sync allocates far more than the agent keeps: a (re)list holds
//! every object of a kind at once, and the model keeps a few fields of each.
//! glibc's malloc keeps freed memory mapped, so without this the resident
//! size stays near the initial list's peak (at 10,000 Services x 10
//! endpoints from the apiserver: 128 MiB, of which about 60 MiB is in use).

/// Fixes glibc's trim threshold, which it otherwise raises after large
/// frees (such as a whole manifest's text), after which freed memory stays
/// mapped. The file parser's per-thread heaps still keep part of theirs: a
/// cold start from a 10,000-Service file ends at 125-146 MiB resident
/// (about 90 MiB when parsed on one thread, which takes 0.3 s longer).
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
