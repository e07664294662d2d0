//! One machine's row, as `/tests/machines` (the fleet room) and the dashboard's workers table
//! show it.

use super::time::ago;
use crate::scheduler::workers::Machine;

/// One machine row.
pub struct MachineRow {
    pub username: String,
    pub cores: u32,
    pub country: String,
    pub short_name: String,
    pub mnps: String,
    pub max_memory: u64,
    pub uname: String,
    pub arch: String,
    /// The worker's compiler and its version (`g++ 13.2.0`).
    pub compiler: String,
    /// The worker's Python version (`3.11.4`).
    pub python: String,
    pub version: String,
    pub run_id: String,
    pub running_on: String,
    pub task_id: usize,
    pub last_active: String,
}

impl MachineRow {
    pub(in crate::http::ui) fn of(m: &Machine) -> Self {
        let tag: String = m.new_tag.chars().take(20).collect();
        let clipped = if m.new_tag.chars().count() > 20 {
            format!("{tag}...")
        } else {
            tag
        };
        MachineRow {
            username: m.username.clone(),
            cores: m.concurrency,
            country: m.country_code.clone(),
            short_name: m.short_name.clone(),
            mnps: format!("{:.2}", m.nps / 1e6),
            max_memory: m.max_memory,
            uname: m.uname.clone(),
            arch: m.worker_arch.clone(),
            compiler: m.compiler.clone(),
            python: m.python.clone(),
            version: format!("{}{}", m.version, if m.modified { "*" } else { "" }),
            run_id: m.run_id.clone(),
            running_on: format!("{clipped}/{}", m.task_id),
            task_id: m.task_id,
            last_active: ago(Some(&m.last_updated)),
        }
    }

    /// Whether `q` (lower case) occurs in any shown column.
    pub(in crate::http::ui) fn matches(&self, q: &str) -> bool {
        q.is_empty()
            || [
                &self.username,
                &self.short_name,
                &self.country,
                &self.mnps,
                &self.uname,
                &self.arch,
                &self.compiler,
                &self.python,
                &self.version,
                &self.running_on,
                &self.last_active,
            ]
            .iter()
            .any(|f| f.to_lowercase().contains(q))
            || self.cores.to_string() == q
            || self.max_memory.to_string().contains(q)
    }
}
