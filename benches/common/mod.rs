//! What the benches share: a worker's `worker_info` for a numbered machine.

use shoal::rundb::model::WorkerInfo;

/// The `worker_info` of bench worker `n` (its own unique key and address, user `bench`).
pub fn worker(n: usize) -> WorkerInfo {
    WorkerInfo {
        uname: "Linux 6.1".into(),
        architecture: vec!["64bit".into(), "ELF".into()],
        concurrency: 4,
        max_memory: 8000,
        min_threads: 1,
        username: "bench".into(),
        version: 325,
        python_version: vec![3, 11, 7],
        gcc_version: vec![12, 2, 0],
        compiler: "g++".into(),
        unique_key: format!("{n:08x}-1111-4222-8333-{n:012x}"),
        modified: false,
        worker_arch: "x86-64-avx2".into(),
        arch: "?".into(),
        nps: 1e6,
        near_github_api_limit: false,
        remote_addr: format!("10.{}.{}.{}", n >> 16 & 255, n >> 8 & 255, n & 255),
        country_code: "?".into(),
    }
}
