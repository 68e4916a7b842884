//! `cargo xtask dist`: what a user installs without Rust, LLVM or bpf-linker.
//!
//! - `target/dist/montrace-x86_64-linux-musl.tar.gz`: a static (musl) `montrace` with the eBPF
//!   programs inside, laid out as an install prefix (`bin/`, `share/man/man1/`, the shells'
//!   completion directories), so that `tar -xz -C /usr/local --strip-components=1` installs it.
//!   A static binary runs on any x86_64 Linux whatever its C library; it cannot `dlopen`, so it
//!   has no NVIDIA GPU monitoring (`montrace doctor` says so): GPU users take the wheel.
//! - With `--wheel`, the Python wheel of the glibc build (NVML is loaded at run time), which
//!   maturin's auditwheel tags with the oldest manylinux policy the binary meets.
//!
//! The asset's name carries no version, so that a release's "latest" URL stays the same (the
//! version is in the tarball's top directory and in `montrace --version`).

use crate::util::{self, check_quietly};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The static target: Rust's musl target links the C library in.
pub const TARGET: &str = "x86_64-unknown-linux-musl";
/// The tarball's file name (and the asset name docs/ci.md downloads).
pub const TARBALL: &str = "montrace-x86_64-linux-musl.tar.gz";

/// `cargo xtask dist [--wheel]`.
pub fn dist(verbose: bool, wheel: bool) -> Result<()> {
    crate::setup::setup(verbose)?;
    let tarball = build_tarball(verbose)?;
    eprintln!(
        "xtask: built {}\n  install it with: sudo tar -xzf {} -C /usr/local --strip-components=1 --no-same-owner",
        tarball.display(),
        tarball.display()
    );
    if wheel {
        let wheel = crate::python::build_wheel(true, verbose)?;
        eprintln!("xtask: built {}", wheel.display());
    }
    Ok(())
}

/// Builds the static binary and packs it, with its completions and man pages, into
/// `target/dist/` ([`TARBALL`]); returns the tarball's path.
pub fn build_tarball(verbose: bool) -> Result<PathBuf> {
    let binary = build_static(verbose)?;
    let version = output_of(Command::new(&binary).arg("--version"))?;
    // "montrace 0.1.0"
    let version = version
        .split_whitespace()
        .nth(1)
        .context("`montrace --version` printed no version")?
        .to_string();

    let dist = util::target_dir().join("dist");
    let top = format!("montrace-{version}-x86_64-linux-musl");
    let stage = dist.join(&top);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("emptying {}", stage.display()))?;
    }
    for dir in LAYOUT_DIRS {
        std::fs::create_dir_all(stage.join(dir))?;
    }
    std::fs::copy(&binary, stage.join("bin/montrace"))?;
    let staged = stage.join("bin/montrace");
    // Symbols are a third of the download and nothing a user needs (binutils' strip).
    check_quietly(Command::new("strip").arg(&staged), verbose)
        .context("stripping the static montrace failed")?;
    for (shell, path) in COMPLETIONS {
        let text = output_of(Command::new(&staged).args(["completions", shell]))?;
        std::fs::write(stage.join(path), text)?;
    }
    let man = stage.join("share/man/man1");
    check_quietly(
        Command::new(&staged).arg("man").arg("--dir").arg(&man),
        verbose,
    )?;
    let root = util::workspace_root();
    for doc in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
        if root.join(doc).exists() {
            std::fs::copy(root.join(doc), stage.join("share/doc/montrace").join(doc))?;
        }
    }
    let tarball = dist.join(TARBALL);
    // Owned by root in the archive whoever builds it: `tar -x` as root keeps the owner.
    check_quietly(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
            .arg(&tarball)
            .arg("-C")
            .arg(&dist)
            .arg(&top),
        verbose,
    )
    .context("packing the tarball failed")?;
    Ok(tarball)
}

/// Builds the static (musl, release) montrace, checks that it is static, and returns its path
/// (unstripped: the tarball strips its own copy).
pub fn build_static(verbose: bool) -> Result<PathBuf> {
    let mut build = util::cargo();
    build.args(["build", "--release", "-p", "monitor", "--target", TARGET]);
    check_quietly(&mut build, verbose).context("building the static (musl) montrace failed")?;
    let binary = util::target_dir()
        .join(TARGET)
        .join("release")
        .join("montrace");
    let elf = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    if let Some(why) = not_static(&elf) {
        bail!("{} is not a static binary: {why}", binary.display());
    }
    Ok(binary)
}

/// The install prefix's directories, relative to the tarball's top directory.
const LAYOUT_DIRS: &[&str] = &[
    "bin",
    "share/man/man1",
    "share/bash-completion/completions",
    "share/zsh/site-functions",
    "share/fish/vendor_completions.d",
    "share/doc/montrace",
];

/// Each shell's completion script and where its package manager's convention puts it.
const COMPLETIONS: &[(&str, &str)] = &[
    ("bash", "share/bash-completion/completions/montrace"),
    ("zsh", "share/zsh/site-functions/_montrace"),
    ("fish", "share/fish/vendor_completions.d/montrace.fish"),
];

fn output_of(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {}", util::describe(cmd)))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            util::describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why an x86_64 ELF file is not static (it names a program interpreter, i.e. the dynamic
/// loader), or None when it is. A static-pie binary has a dynamic section but no interpreter.
pub fn not_static(elf: &[u8]) -> Option<String> {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Some("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    for i in 0..count {
        let at = phoff + i * size;
        let Some(header) = elf.get(at..at + 4) else {
            return Some("its program headers are cut off".into());
        };
        if u32::from_le_bytes(header.try_into().unwrap()) == PT_INTERP {
            return Some("it names a program interpreter (dynamic loader)".into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_check_tells_the_glibc_build_from_a_static_one() {
        // This test binary is linked against glibc: it has an interpreter.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(not_static(&me).is_some_and(|why| why.contains("interpreter")));
        assert!(not_static(b"#!/bin/sh\n").is_some());
    }
}
