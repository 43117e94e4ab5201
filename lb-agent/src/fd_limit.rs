//! The open-file limit, raised at start as Go programs (kube-proxy among
//! them) get it raised by their runtime.

use std::io;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, so that the HTTP
/// listeners' connection caps, not the usual soft limit of 1,024
/// descriptors, bound what clients can hold open. Returns the new soft limit.
pub fn raise() -> io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// [`raise`], logging the outcome: a failure only leaves the lower limit.
pub fn raise_or_warn() {
    match raise() {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(
            error = &e as &dyn std::error::Error,
            "raising the open-file limit to the hard limit"
        ),
    }
}

#[cfg(test)]
mod tests {
    use rlimit::Resource;

    #[test]
    fn raises_the_soft_limit_to_the_hard_limit() {
        let (_, hard) = Resource::NOFILE.get().expect("getrlimit");
        // One below the hard limit: lower, yet no risk for the tests that
        // run beside this one and hold many descriptors.
        Resource::NOFILE.set(hard - 1, hard).expect("setrlimit");
        assert_eq!(super::raise().expect("raise"), hard);
        assert_eq!(Resource::NOFILE.get().expect("getrlimit"), (hard, hard));
    }
}
