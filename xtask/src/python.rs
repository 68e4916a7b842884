//! The Python package: `cargo xtask wheel` builds the wheel (maturin: the `montrace` binary plus
//! the pure-Python package in python/), and the python tier of `cargo xtask test` installs the
//! wheel into a fresh virtual environment and runs python/tests there with pytest.

use crate::util::{self, check, check_quietly};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the tests' environment installs beside the wheel: the test runner, the optional frame
/// libraries, MLflow with the sqlite backend's libraries (its file backend is retired), and Parsl.
pub const TEST_PACKAGES: &[&str] = &[
    "pytest",
    "pandas",
    "polars",
    "mlflow-skinny",
    "sqlalchemy",
    "alembic",
    // A real workflow engine: python/tests/test_parsl.py runs docs/cluster.md's Parsl
    // HighThroughputExecutor workflow, whose bash_app tasks montrace.parsl records. Pinned: the
    // example uses recent APIs (`with parsl.load(...)`, `max_workers_per_node`).
    "parsl==2026.10.26",
];

/// The extra the docs' environment installs with the wheel: what docs/python.md's install lines
/// install (pandas, for DataFrames). Nothing else, so that no package the tests pull in (MLflow
/// brings cloudpickle) makes an example work that would fail for a user.
pub const DOCS_EXTRA: &str = "pandas";

/// Builds the wheel into `target/wheels/<profile>/` (emptied first) and returns its path. The
/// tests use the `dev` profile (it reuses the debug build); `release` is what users install.
pub fn build_wheel(release: bool, verbose: bool) -> Result<PathBuf> {
    let profile = if release { "release" } else { "dev" };
    let out = util::target_dir().join("wheels").join(profile);
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("emptying {}", out.display()))?;
    }
    let mut maturin = Command::new("python3");
    maturin
        .args([
            "-m",
            "maturin",
            "build",
            "--strip",
            "--profile",
            profile,
            "--out",
        ])
        .arg(&out)
        .current_dir(util::workspace_root().join("python"));
    check_quietly(&mut maturin, verbose).context("building the wheel (maturin) failed")?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("expected one wheel in {}, found {other:?}", out.display()),
    }
}

/// PyPA's `auditwheel show` on the wheel: it must find the binary and name a manylinux tag
/// (the oldest glibc the binary's symbols allow) that the wheel's file name carries, which is
/// what PyPI and pip check. Returns the tag.
pub fn check_platform_tag(wheel: &Path) -> Result<String> {
    let out = Command::new("python3")
        .args(["-m", "auditwheel", "show"])
        .arg(wheel)
        .output()
        .context("running auditwheel (installed by `cargo xtask setup`)")?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("auditwheel show {} failed: {text}", wheel.display());
    }
    let Some(tag) = auditwheel_tag(&text) else {
        bail!(
            "auditwheel show named no platform tag for {}: {text}",
            wheel.display()
        );
    };
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    if !tag.starts_with("manylinux") || !name.contains(&tag) {
        bail!("auditwheel says the wheel is {tag}, but it is named {name}: {text}");
    }
    Ok(tag)
}

/// The tag in auditwheel's "constrains the platform tag to "manylinux_2_35_x86_64"" (or "is
/// consistent with the following platform tag: "..."").
fn auditwheel_tag(text: &str) -> Option<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    ["platform tag to \"", "following platform tag: \""]
        .iter()
        .find_map(|lead| text.split_once(lead))
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(tag, _)| tag.to_string())
}

/// `cargo xtask wheel [--release]`.
pub fn wheel(verbose: bool, release: bool) -> Result<()> {
    crate::setup::setup(verbose)?;
    let wheel = build_wheel(release, verbose)?;
    eprintln!(
        "xtask: built {}\n  install it with: pip install {}",
        wheel.display(),
        wheel.display()
    );
    Ok(())
}

/// Where the tests' virtual environment goes: under the system's temporary directory, so the
/// ordinary user the tests create can run its interpreter (a checkout under /root may be closed
/// to them); one per checkout, so that two checkouts' suites never clear each other's.
pub fn venv_dir() -> PathBuf {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    util::workspace_root().hash(&mut hasher);
    std::env::temp_dir().join(format!("montrace-python-tests-{:016x}", hasher.finish()))
}

/// The docs' virtual environment (the wheel and its declared dependencies only), beside
/// [`venv_dir`].
pub fn docs_venv_dir() -> PathBuf {
    let mut name = venv_dir().into_os_string();
    name.push("-docs");
    PathBuf::from(name)
}

/// The python tier: the wheel, a fresh virtual environment with it and [`TEST_PACKAGES`] and one
/// with the wheel alone ([`docs_venv_dir`]), then `pytest python/tests` (as root: some tests create an ordinary user).
pub fn test(verbose: bool) -> Result<()> {
    let wheel = build_wheel(false, verbose)?;
    let tag = check_platform_tag(&wheel)?;
    eprintln!("xtask: auditwheel accepts the wheel as {tag}");
    let venv = venv_dir();
    let base = venv_base_python();
    check_quietly(
        Command::new(base)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        verbose,
    )
    .context("creating the tests' virtual environment failed")?;
    let python = venv.join("bin/python");
    check_quietly(pip(&python).arg(&wheel).args(TEST_PACKAGES), verbose)
        .context("installing the wheel and the test packages into a fresh virtual environment")?;
    // docs/python.md's examples run in an environment with the wheel and its declared
    // dependencies only (python/tests/test_docs.py).
    let docs_venv = docs_venv_dir();
    check_quietly(
        Command::new(base)
            .args(["-m", "venv", "--clear"])
            .arg(&docs_venv),
        verbose,
    )
    .context("creating the docs' virtual environment failed")?;
    let docs_python = docs_venv.join("bin/python");
    let wheel_with_extra = format!("{}[{DOCS_EXTRA}]", wheel.display());
    check_quietly(pip(&docs_python).arg(&wheel_with_extra), verbose)
        .context("installing the wheel alone into the docs' virtual environment")?;
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(util::workspace_root().join("python/tests"))
        .current_dir(util::workspace_root())
        // The wheel's own binary, not the one the e2e tier uses.
        .env_remove("MONTRACE_BIN")
        // docs/python.md's install lines are checked against it.
        .env("MONTRACE_WHEEL", &wheel)
        .env("MONTRACE_DOCS_PYTHON", &docs_python);
    if !util::is_root() {
        bail!("the python tests create an ordinary user: run `cargo xtask test` as root");
    }
    check(&mut pytest).context("python tests failed")
}

/// The interpreter the tests' virtual environments are made from: the system's
/// (`/usr/bin/python3`, which `cargo xtask setup` makes able to) when it makes venvs, else the
/// first `python3` on PATH. The ordinary users the tests create must be able to run it from
/// anything they start: an interpreter under /root (a pyenv) is closed to them, and a venv's
/// scripts lead back to it by their shebangs (Parsl's workflow starts `interchange.py` and
/// `process_worker_pool.py` that way).
fn venv_base_python() -> &'static str {
    if crate::setup::system_python_makes_venvs() {
        crate::setup::SYSTEM_PYTHON
    } else {
        "python3"
    }
}

fn pip(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pip", "install", "--quiet"])
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    cmd
}

#[cfg(test)]
mod tag_tests {
    #[test]
    fn auditwheel_tags_are_read_from_either_wording() {
        let constrained = "This constrains the platform tag to \"manylinux_2_35_x86_64\". In order";
        assert_eq!(
            super::auditwheel_tag(constrained).as_deref(),
            Some("manylinux_2_35_x86_64")
        );
        let consistent =
            "x.whl is consistent with the following platform tag:\n\"manylinux_2_17_x86_64\".";
        assert_eq!(
            super::auditwheel_tag(consistent).as_deref(),
            Some("manylinux_2_17_x86_64")
        );
        assert_eq!(super::auditwheel_tag("no ELF found"), None);
    }
}
