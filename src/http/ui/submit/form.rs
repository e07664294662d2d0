//! The new-test form's values: the branch fields (`tests_repo`, `new_tag`, `base_tag`, the
//! benches `new_signature` and `base_signature`; Fishtest's `tests-repo`, `test-branch`, …
//! are read too), Fishtest's other names (`num-games`, `sprt_elo0`, …), the "advanced" fields
//! that skip GitHub (the resolved commits, their subjects and the nets, as `/api/create_run`
//! takes them), the defaults, the presets (`?preset=`, with their SPRT bounds) and a run's
//! values for a rerun.
//! Reading the posted form into run arguments is `submit_args.rs`'s; the page is `submit.rs`'s.

use serde::Deserialize;

use crate::rundb::model::Run;

/// The default book (Fishtest's).
pub const DEFAULT_BOOK: &str = "UHO_Lichess_4852_v1.epd";
/// The posted form, and the values the page shows (all text, as typed; a checkbox is present
/// when ticked).
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(default)]
pub struct RunForm {
    /// The tests repository (empty: the user's, else the official one). Fishtest's name,
    /// `tests-repo`, is read too.
    #[serde(alias = "tests-repo")]
    pub tests_repo: String,
    /// The branch, tag or SHA to test (Fishtest's `test-branch` is read too).
    #[serde(rename = "new_tag", alias = "test-branch")]
    pub test_branch: String,
    /// The base (empty: `master`; Fishtest's `base-branch` is read too).
    #[serde(rename = "base_tag", alias = "base-branch")]
    pub base_branch: String,
    /// The benches: empty, they are read from the commit messages.
    #[serde(rename = "new_signature", alias = "test-signature")]
    pub test_signature: String,
    #[serde(alias = "base-signature")]
    pub base_signature: String,
    pub resolved_new: String,
    pub resolved_base: String,
    pub msg_new: String,
    pub msg_base: String,
    pub new_nets: String,
    pub base_nets: String,
    #[serde(rename = "new-options")]
    pub new_options: String,
    #[serde(rename = "base-options")]
    pub base_options: String,
    #[serde(rename = "run-info")]
    pub run_info: String,
    /// `sprt`, `games` or `spsa`.
    pub stop_rule: String,
    #[serde(rename = "num-games")]
    pub num_games: String,
    /// A [`BOUNDS`] key.
    pub bounds: String,
    pub sprt_elo0: String,
    pub sprt_elo1: String,
    pub elo_model: String,
    #[serde(rename = "spsa_A")]
    pub spsa_a: String,
    pub spsa_alpha: String,
    pub spsa_gamma: String,
    pub spsa_raw_params: String,
    pub threads: String,
    pub tc: String,
    pub new_tc: String,
    /// "Time odds": `new_tc` is used only when ticked.
    pub odds: Option<String>,
    pub priority: String,
    pub throughput: String,
    /// The run's sliding window: at most this many active tasks (empty: no window).
    pub max_active_tasks: String,
    pub book: String,
    #[serde(rename = "book-depth")]
    pub book_depth: String,
    #[serde(rename = "arch-filter")]
    pub arch_filter: String,
    #[serde(rename = "checkbox-arch-filter")]
    pub use_arch_filter: Option<String>,
    pub compiler: String,
    #[serde(rename = "checkbox-compiler")]
    pub use_compiler: Option<String>,
    #[serde(rename = "auto-purge")]
    pub auto_purge: Option<String>,
    /// Labelled "No adjudication": ticked means adjudication is off.
    pub adjudication: Option<String>,
    pub master_repo: String,
    pub rescheduled_from: String,
    pub csrf_token: Option<String>,
    /// A test group's branches, one per line (issue 39, `submit_group.rs`).
    pub takes: String,
    /// A preset button of the form: the form comes back with the preset applied over what
    /// was typed, and nothing is submitted.
    #[serde(rename = "preset")]
    pub apply_preset: String,
    /// `1`: the "Create without nets" button, after the form warned that a side's nets
    /// resolved to none (the run is created without them).
    pub confirm_no_nets: String,
}

/// The SPRT bounds choices: key, label, elo0, elo1 (`custom` takes the two fields).
pub const BOUNDS: [(&str, &str, f64, f64); 4] = [
    ("standard_stc", "Standard STC {0.00, 2.00}", 0.0, 2.0),
    ("standard_ltc", "Standard LTC {0.50, 2.50}", 0.5, 2.5),
    (
        "nonreg_stc",
        "Non-regression STC {-1.75, 0.25}",
        -1.75,
        0.25,
    ),
    (
        "nonreg_ltc",
        "Non-regression LTC {-1.75, 0.25}",
        -1.75,
        0.25,
    ),
];

/// A test-type preset: tc, threads, Hash, throughput, bounds.
pub struct Preset {
    pub key: &'static str,
    pub label: &'static str,
    tc: &'static str,
    threads: u32,
    hash: u32,
    throughput: u32,
    bounds: &'static str,
}

/// Fishtest's presets that need no GitHub (its PT presets name master's latest commit).
pub const PRESETS: [Preset; 6] = [
    Preset {
        key: "stc",
        label: "STC",
        tc: "10+0.1",
        threads: 1,
        hash: 16,
        throughput: 100,
        bounds: "standard_stc",
    },
    Preset {
        key: "ltc",
        label: "LTC",
        tc: "60+0.6",
        threads: 1,
        hash: 64,
        throughput: 100,
        bounds: "standard_ltc",
    },
    Preset {
        key: "stc-smp",
        label: "STC SMP",
        tc: "5+0.05",
        threads: 8,
        hash: 64,
        throughput: 100,
        bounds: "standard_stc",
    },
    Preset {
        key: "ltc-smp",
        label: "LTC SMP",
        tc: "20+0.2",
        threads: 8,
        hash: 256,
        throughput: 100,
        bounds: "standard_ltc",
    },
    Preset {
        key: "vltc",
        label: "VLTC",
        tc: "180+1.8",
        threads: 1,
        hash: 192,
        throughput: 50,
        bounds: "standard_stc",
    },
    Preset {
        key: "vltc-smp",
        label: "VLTC SMP",
        tc: "60+0.6",
        threads: 8,
        hash: 512,
        throughput: 50,
        bounds: "standard_ltc",
    },
];

/// The throughput select's values (%).
pub const THROUGHPUTS: [&str; 5] = ["10", "25", "50", "100", "200"];

/// Replaces (or adds) the `Hash=N` option.
fn with_hash(options: &str, hash: u32) -> String {
    let mut found = false;
    let mut tokens: Vec<String> = options
        .split_whitespace()
        .map(|t| {
            if t.starts_with("Hash=") {
                found = true;
                format!("Hash={hash}")
            } else {
                t.to_string()
            }
        })
        .collect();
    if !found {
        tokens.push(format!("Hash={hash}"));
    }
    tokens.join(" ")
}

impl RunForm {
    /// The empty form: Fishtest's defaults, the user's tests repository.
    pub fn defaults(tests_repo: &str) -> Self {
        RunForm {
            tests_repo: tests_repo.to_string(),
            base_branch: "master".into(),
            new_options: "Hash=16".into(),
            base_options: "Hash=16".into(),
            stop_rule: "sprt".into(),
            num_games: "60000".into(),
            bounds: "standard_stc".into(),
            sprt_elo0: "0.0".into(),
            sprt_elo1: "2.0".into(),
            elo_model: "normalized".into(),
            spsa_a: "0.1".into(),
            spsa_alpha: "0.602".into(),
            spsa_gamma: "0.101".into(),
            threads: "1".into(),
            tc: "10+0.1".into(),
            new_tc: "10+0.1".into(),
            priority: "0".into(),
            throughput: "100".into(),
            book: DEFAULT_BOOK.into(),
            book_depth: "8".into(),
            compiler: "clang++".into(),
            ..RunForm::default()
        }
    }

    /// The form of a rerun: every argument of `run`, so that submitting it unchanged creates
    /// an equivalent run (`rescheduled_from` names the old one).
    pub fn rerun(run: &Run) -> Self {
        let a = &run.args;
        let mut f = RunForm::defaults(&a.tests_repo);
        f.test_branch = a.new_tag.clone();
        f.base_branch = a.base_tag.clone();
        f.test_signature = a.new_signature.clone();
        f.base_signature = a.base_signature.clone();
        f.resolved_new = a.resolved_new.clone();
        f.resolved_base = a.resolved_base.clone();
        f.msg_new = a.msg_new.clone();
        f.msg_base = a.msg_base.clone();
        f.new_nets = a.new_nets.join(" ");
        f.base_nets = a.base_nets.join(" ");
        f.new_options = a.new_options.clone();
        f.base_options = a.base_options.clone();
        f.run_info = a.info.clone();
        f.tc = a.tc.clone();
        f.new_tc = if a.new_tc.is_empty() {
            a.tc.clone()
        } else {
            a.new_tc.clone()
        };
        f.odds = (f.new_tc != f.tc).then(|| "on".into());
        f.threads = a.threads.to_string();
        f.priority = a.priority.to_string();
        f.throughput = a.throughput.to_string();
        f.max_active_tasks = a
            .max_active_tasks
            .map(|n| n.to_string())
            .unwrap_or_default();
        f.book = a.book.clone();
        f.book_depth = a.book_depth.clone();
        if let Some(filter) = &a.arch_filter {
            f.arch_filter = filter.clone();
            f.use_arch_filter = Some("on".into());
        }
        if let Some(compiler) = &a.compiler {
            f.compiler = compiler.clone();
            f.use_compiler = Some("on".into());
        }
        f.auto_purge = a.auto_purge.then(|| "on".into());
        f.adjudication = (!a.adjudication).then(|| "on".into());
        f.master_repo = a.master_repo.clone().unwrap_or_default();
        f.rescheduled_from = run.id.clone();
        if let Some(s) = &a.sprt {
            f.stop_rule = "sprt".into();
            f.bounds = "custom".into();
            f.sprt_elo0 = s.elo0.to_string();
            f.sprt_elo1 = s.elo1.to_string();
            f.elo_model = s.elo_model.as_str().into();
        } else if let Some(s) = &a.spsa {
            f.stop_rule = "spsa".into();
            f.num_games = a.num_games.to_string();
            // The form gives A as a ratio of the iterations: A = int(ratio · games / 2).
            if a.num_games > 0 {
                f.spsa_a = (2.0 * s.stability / a.num_games as f64).to_string();
            }
            f.spsa_alpha = s.alpha.to_string();
            f.spsa_gamma = s.gamma.to_string();
            f.spsa_raw_params = s.raw_params.clone();
        } else {
            f.stop_rule = "games".into();
            f.num_games = a.num_games.to_string();
        }
        f
    }

    /// Applies a preset: time control, threads, Hash, throughput, bounds; clears auto-purge.
    pub fn apply(&mut self, p: &Preset) {
        self.tc = p.tc.into();
        self.new_tc = p.tc.into();
        self.odds = None;
        self.threads = p.threads.to_string();
        self.new_options = with_hash(&self.new_options, p.hash);
        self.base_options = with_hash(&self.base_options, p.hash);
        self.throughput = if self.stop_rule == "spsa" && p.key == "ltc" {
            "50".into()
        } else {
            p.throughput.to_string()
        };
        if self.stop_rule != "spsa" {
            self.stop_rule = "sprt".into();
        }
        if let Some((key, _, elo0, elo1)) = BOUNDS.iter().find(|b| b.0 == p.bounds) {
            self.bounds = (*key).into();
            self.sprt_elo0 = format!("{elo0:.2}");
            self.sprt_elo1 = format!("{elo1:.2}");
        }
        self.auto_purge = None;
    }

    /// The preset these values match (by time control and threads), for the highlight.
    pub fn preset(&self) -> Option<&'static str> {
        PRESETS
            .iter()
            .find(|p| p.tc == self.tc.trim() && p.threads.to_string() == self.threads.trim())
            .map(|p| p.key)
    }
}

/// A form as a user fills it for an SPRT test (the unit tests' example).
#[cfg(test)]
pub(crate) fn filled() -> RunForm {
    let mut f = RunForm::defaults("https://github.com/alice/Stockfish");
    f.test_branch = "patch".into();
    f.resolved_new = "b".repeat(40);
    f.resolved_base = "a".repeat(40);
    f.test_signature = "1234568".into();
    f.base_signature = "1234567".into();
    f.run_info = "info".into();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_set_the_time_control_hash_and_bounds() {
        let mut f = filled();
        f.auto_purge = Some("on".into());
        f.new_options = "Hash=16 Foo=1".into();
        let ltc = PRESETS.iter().find(|p| p.key == "ltc-smp").unwrap();
        f.apply(ltc);
        assert_eq!((f.tc.as_str(), f.threads.as_str()), ("20+0.2", "8"));
        assert_eq!(f.new_options, "Hash=256 Foo=1");
        assert_eq!(f.base_options, "Hash=256");
        assert_eq!(
            (f.bounds.as_str(), f.sprt_elo0.as_str()),
            ("standard_ltc", "0.50")
        );
        assert!(f.auto_purge.is_none());
        assert_eq!(f.preset(), Some("ltc-smp"));
        assert_eq!(with_hash("", 64), "Hash=64");
    }
}
