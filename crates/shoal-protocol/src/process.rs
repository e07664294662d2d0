//! Process plumbing shared by the server and its clients (the simulator raises the same limit
//! before it opens thousands of connections, and before it starts the server as its child).
//!
//! Owns: the open-files limit.
//! Must not: know HTTP, the store or the domain; log (callers decide what a limit means).

/// Raises this process's open-files limit towards `want`: the soft limit up to the hard one,
/// and the hard one too when `raise_hard` and the process may (root). Returns the (soft, hard)
/// limits in force afterwards. Children started later inherit them.
pub fn raise_open_files_limit(want: u64, raise_hard: bool) -> std::io::Result<(u64, u64)> {
    use rlimit::Resource;
    let (soft, hard) = Resource::NOFILE.get()?;
    if soft >= want {
        return Ok((soft, hard));
    }
    if raise_hard && want > hard && Resource::NOFILE.set(want, want).is_ok() {
        return Resource::NOFILE.get();
    }
    Resource::NOFILE.set(want.min(hard), hard)?;
    Resource::NOFILE.get()
}
