//! `cargo xtask`: the developer entry points of montrace.
//!
//! - `cargo xtask setup`: install what a fresh machine lacks (idempotent, quiet when done).
//! - `cargo xtask run [-- CMD ARGS...]`: set-up, release build, then montrace on CMD (or a demo workload).
//! - `cargo xtask test [--unit | --e2e]`: set-up, then the unit tests and the root end-to-end tests.
//! - `cargo xtask test --kernels [--kernel NAME]`: the exactness subset in a VM of each kernel of a list
//!   (`--kernels --no-boot`: docs/kernels.md again from the last boots).
//! - `cargo xtask test --stress N`: the end-to-end suite N times, the second half beside noisy
//!   neighbours (a CPU hog, an fsync writer, a page-cache filler, a memory toucher).
//! - `cargo xtask bench [--quick]`: the benchmark suite; writes BENCHMARKS.md and bench/results.json
//!   (`--only GROUP,... --update`: measures some groups again and replaces only their sections).
//! - `cargo xtask gpu-check`: release build, then montrace's GPU figures against nvidia-smi's.
//! - `cargo xtask setcap [--to PATH]`: release build, install, and the install-time grant.
//! - `cargo xtask wheel [--release]`: the Python wheel (the binary and the `montrace` package).
//! - `cargo xtask dist [--wheel]`: the release tarball (a static montrace, completions, man pages)
//!   and the release wheel.

mod bench;
mod dist;
// The no-long-function check, one file for both crates: here it scans xtask/src.
#[cfg(test)]
#[path = "../../monitor/src/fn_length.rs"]
mod fn_length;
mod gpu_check;
mod kernels;
mod python;
mod run;
mod setup;
mod stress;
mod suite;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "montrace developer tasks"
)]
struct Cli {
    /// Show the output of installers (apt-get, rustup, cargo install, pip) as they run.
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install what this machine lacks to build and test montrace (rust-src,
    /// llvm-22-dev, bpf-linker 0.13.0, python test packages).
    Setup,
    /// Set up, build montrace (release), then run `montrace run -- CMD ARGS...`
    /// (a built-in demo workload when no CMD is given). Exits with montrace's exit code.
    Run {
        /// The command to monitor, after `--`.
        #[arg(last = true, value_name = "CMD ARGS")]
        cmd: Vec<String>,
    },
    /// Set up, then run the unit tests, the Python package's tests (the wheel in a fresh virtual
    /// environment) and the root end-to-end tests, stopping at the first failure.
    Test {
        /// Only the unit tests (`cargo test` of the workspace's default members).
        #[arg(long, conflicts_with_all = ["e2e", "python"])]
        unit: bool,
        /// Only the Python package's tests (pytest python/tests, as root).
        #[arg(long, conflicts_with = "e2e")]
        python: bool,
        /// Only the end-to-end tests (crate `tests`, run as root against target/debug/montrace).
        #[arg(long)]
        e2e: bool,
        /// Only the kernel tier: each kernel of its list booted in a VM, `montrace doctor` and
        /// the exactness subset run inside; rewrites docs/kernels.md from what they report.
        #[arg(long)]
        kernels: bool,
        /// With --kernels: only write docs/kernels.md again from the last boots' outputs
        /// (target/kernels), booting nothing.
        #[arg(long, requires = "kernels")]
        no_boot: bool,
        /// The kernel tier on one kernel of its list (e.g. debian-12-6.1).
        #[arg(long, value_name = "NAME", conflicts_with_all = ["unit", "python", "e2e"])]
        kernel: Option<String>,
        /// Run the end-to-end suite N times instead, the second half beside a CPU hog on one
        /// core, an fsync writer, a page-cache filler and a memory toucher (bounded shares of
        /// the free disk and memory): what to run before calling a timing-sensitive test fixed.
        #[arg(long, value_name = "N", conflicts_with_all = ["unit", "python", "e2e"])]
        stress: Option<u32>,
    },
    /// Benchmarks (as root): completeness, accuracy, overhead, agent cost, throughput and
    /// start-up, side by side with psrecord; writes BENCHMARKS.md and bench/results.json.
    Bench(bench::BenchArgs),
    /// Build montrace (release), record a PyTorch/CuPy workload on this machine's NVIDIA GPU
    /// and compare montrace's GPU figures with nvidia-smi's (xtask/gpu-check/gpu_check.py).
    GpuCheck(gpu_check::GpuCheckArgs),
    /// Build montrace (release), install it (root, 0755) and give it CAP_BPF + CAP_PERFMON
    /// (`montrace setcap`): every user then gets exact tracking without sudo. Uses sudo when
    /// not root.
    Setcap {
        /// Where to install it.
        #[arg(long, default_value = run::INSTALL_PATH)]
        to: std::path::PathBuf,
    },
    /// Build the Python wheel (maturin): the montrace binary and the `montrace` package, into
    /// target/wheels/<profile>/.
    Wheel {
        /// An optimised binary (what to install); without it, the debug build's.
        #[arg(long)]
        release: bool,
    },
    /// Build what users install with no Rust, LLVM or bpf-linker: a static (musl) montrace with
    /// its completions and man pages in target/dist/montrace-x86_64-linux-musl.tar.gz (unpack
    /// with `tar -xz -C /usr/local --strip-components=1`).
    Dist {
        /// The release wheel too (target/wheels/release/).
        #[arg(long)]
        wheel: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    util::ensure_cargo_bin_on_path();
    let result = match cli.command {
        Command::Setup => setup::setup(cli.verbose),
        Command::Run { cmd } => run::run(cli.verbose, &cmd),
        Command::Test {
            stress: Some(n), ..
        } => stress::stress(cli.verbose, n),
        Command::Test {
            kernels: true,
            no_boot: true,
            ..
        } => kernels::doc_from_last(),
        Command::Test {
            kernel: Some(name), ..
        } => suite::kernel(cli.verbose, &name),
        Command::Test {
            unit,
            python,
            e2e,
            kernels,
            ..
        } => suite::test(
            cli.verbose,
            suite::Tiers::from_flags(unit, python, e2e, kernels),
        ),
        Command::Bench(args) => bench::bench(cli.verbose, args),
        Command::GpuCheck(args) => gpu_check::gpu_check(args),
        Command::Setcap { to } => run::setcap(cli.verbose, &to),
        Command::Wheel { release } => python::wheel(cli.verbose, release),
        Command::Dist { wheel } => dist::dist(cli.verbose, wheel),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from(["xtask", "run", "--", "make", "-j8"]).unwrap();
        match cli.command {
            Command::Run { cmd } => assert_eq!(cmd, ["make", "-j8"]),
            other => panic!("unexpected {other:?}"),
        }
        let cli = Cli::try_parse_from(["xtask", "run"]).unwrap();
        assert!(matches!(cli.command, Command::Run { cmd } if cmd.is_empty()));
    }

    /// Every `cargo xtask ...` the docs show: the words up to a comment, a closing quote or
    /// punctuation.
    fn documented_commands(text: &str) -> Vec<Vec<String>> {
        let mut found = Vec::new();
        for line in text.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("cargo xtask ") {
                rest = &rest[at + "cargo xtask ".len()..];
                let mut words = vec!["xtask".to_owned()];
                for token in rest.split_whitespace() {
                    if token.starts_with(['#', '(']) || token == "&&" {
                        break;
                    }
                    let word = token.trim_end_matches(['`', ')', ',', '.', ':', ';']);
                    if !word.is_empty() {
                        words.push(word.to_owned());
                    }
                    if word.len() != token.len() {
                        break;
                    }
                }
                found.push(words);
            }
        }
        found
    }

    #[test]
    fn every_xtask_command_in_the_docs_parses() {
        let root = crate::util::workspace_root();
        let mut checked = 0;
        for doc in [
            "README.md",
            "BENCHMARKS.md",
            "docs/python.md",
            "docs/ci.md",
            "docs/security.md",
            "docs/report.md",
        ] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            for words in documented_commands(&text) {
                assert!(
                    Cli::try_parse_from(&words).is_ok(),
                    "{doc} shows `cargo {}`, which cargo xtask does not take",
                    words.join(" ")
                );
                checked += 1;
            }
        }
        assert!(checked >= 8, "only {checked} commands found");
        assert_eq!(
            documented_commands("run `cargo xtask test --e2e` (as root), cargo xtask wheel."),
            [vec!["xtask", "test", "--e2e"], vec!["xtask", "wheel"]]
        );
    }

    #[test]
    fn test_tiers_are_exclusive() {
        assert!(Cli::try_parse_from(["xtask", "test", "--unit", "--e2e"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "test", "--unit", "--python"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "test", "--python"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "test", "--e2e"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "test", "--kernels"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "test", "--kernel", "debian-12-6.1"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "test", "--unit", "--kernel", "x"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "test", "--kernels", "--no-boot"]).is_ok());
        assert!(Cli::try_parse_from(["xtask", "test", "--no-boot"]).is_err());
    }
}
