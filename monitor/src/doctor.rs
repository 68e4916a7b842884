//! `montrace doctor`: which tracking mode a run would get on this machine, and why. Every check
//! is made the way a run makes it (the eBPF programs are really loaded and attached, a run
//! cgroup really created, NVML really opened), then undone; nothing is started.
//!
//! `montrace setcap`: the install-time grant (see `privilege`).
use std::path::PathBuf;

use crate::{
    host,
    kernel::btf,
    kernel::ebpf::{Probes, TracepointChoice},
    kernel::features,
    kernel::privilege,
    sampling::cgroup::RunCgroup,
    sampling::gpu::GpuMode,
    sampling::gpu::GpuMonitor,
};

/// One line of the doctor's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub what: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// What the doctor found, before it is judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    pub kernel: String,
    pub root: bool,
    /// This process's effective capabilities.
    pub effective_caps: u64,
    pub binary: Option<PathBuf>,
    /// The binary's file capabilities (permitted), if it has any.
    pub file_caps: Option<u64>,
    /// The kernel's field offsets from BTF, or why not.
    pub btf: Result<(), String>,
    /// Loading and attaching the programs: the mode and the time, or why not.
    pub ebpf: Result<(String, f64), String>,
    /// A run cgroup: its version and where, or why not.
    pub cgroup: Result<String, String>,
    /// NVIDIA GPUs: what a run would say.
    pub gpu: Result<String, String>,
    /// What this kernel gives a run, feature by feature (the table run.json records).
    pub features: Vec<crate::kernel::features::Feature>,
    /// The resident agent, where one is named or listens at the default socket: how it answered.
    pub agent: Option<AgentFacts>,
}

/// The resident agent a run would find.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentFacts {
    pub socket: String,
    /// `MONTRACE_AGENT_SOCKET` names it: runs use it even where they could load their own, and
    /// fail where it does not answer.
    pub named: bool,
    /// Its programs' mode (`tp_btf`, `tracepoint`), or why it did not answer.
    pub mode: Result<String, String>,
}

/// The checks and the verdict, from the facts (pure).
pub fn judge(f: &Facts) -> (Vec<Check>, String) {
    let mut checks = vec![Check {
        what: "kernel",
        ok: true,
        detail: f.kernel.clone(),
    }];
    checks.push(match &f.btf {
        Ok(()) => Check {
            what: "BTF",
            ok: true,
            detail: format!("{} gives the task fields montrace reads", btf::VMLINUX_BTF),
        },
        Err(why) => Check {
            what: "BTF",
            ok: false,
            detail: why.clone(),
        },
    });
    let caps = privilege::CapSets {
        effective: f.effective_caps,
        ..Default::default()
    };
    let granted = f
        .file_caps
        .map(|c| privilege::names(c).join(", "))
        .unwrap_or_else(|| "none".into());
    let binary = f
        .binary
        .as_deref()
        .map_or("this binary".into(), |b| b.display().to_string());
    checks.push(Check {
        what: "privilege",
        ok: f.root || caps.can_trace(),
        detail: if f.root {
            "root (under sudo the command runs as the invoking user, SUDO_UID)".into()
        } else if caps.can_trace() {
            format!("capabilities {granted} from {binary}: dropped once the programs are attached")
        } else {
            format!(
                "none: {binary} has file capabilities {granted}. Exact tracking needs root, or \
                 CAP_BPF + CAP_PERFMON given once with `sudo montrace setcap`"
            )
        },
    });
    checks.push(match &f.ebpf {
        Ok((mode, ms)) => Check {
            what: "eBPF programs",
            ok: true,
            detail: format!("loaded and attached ({mode}) in {ms:.0} ms"),
        },
        Err(why) => Check {
            what: "eBPF programs",
            ok: false,
            detail: why.clone(),
        },
    });
    checks.push(match &f.cgroup {
        Ok(what) => Check {
            what: "run cgroup",
            ok: true,
            detail: format!("{what}: run.json gets the kernel's totals for the tree"),
        },
        Err(why) => Check {
            what: "run cgroup",
            ok: false,
            detail: format!("none ({why}): runs record no cgroup totals and no CPU coverage"),
        },
    });
    checks.push(match &f.gpu {
        Ok(what) => Check {
            what: "NVIDIA GPUs",
            ok: true,
            detail: what.clone(),
        },
        Err(why) => Check {
            what: "NVIDIA GPUs",
            ok: false,
            detail: why.clone(),
        },
    });
    if let Some(agent) = &f.agent {
        checks.push(Check {
            what: "agent",
            ok: agent.mode.is_ok(),
            detail: match &agent.mode {
                Ok(mode) => format!(
                    "{} answers: the runs it follows are exact ({mode})",
                    agent.socket
                ),
                Err(why) => format!("{}: no answer ({why})", agent.socket),
            },
        });
    }
    (checks, verdict(f))
}

/// The one line doctor ends with: what `montrace run` does here (pure).
fn verdict(f: &Facts) -> String {
    // A run uses the agent where it is named, or where it cannot load the programs itself.
    let through_agent = f.agent.as_ref().filter(|a| a.named || f.ebpf.is_err());
    match (through_agent, &f.ebpf) {
        (Some(a), _) if a.named && a.mode.is_err() => format!(
            "montrace run here: fails: {} names {}, which does not answer (start the agent, or \
             unset {0})",
            crate::follow::agent::SOCKET_ENV,
            a.socket
        ),
        (
            Some(AgentFacts {
                socket,
                mode: Ok(mode),
                ..
            }),
            _,
        ) => format!(
            "montrace run here: exact tracking through the montrace agent at {socket} ({mode}): \
             every process of the tree, however short, with its exit figures; no capability needed"
        ),
        (_, Ok((mode, _))) => format!(
            "montrace run here: exact tracking with eBPF ({mode}): every process of the tree, \
             however short, with its exit figures"
        ),
        (_, Err(_)) => "montrace run here: polling /proc every --interval (processes shorter \
                        than that may be missed); see above for what exact tracking needs"
            .into(),
    }
}

/// Makes every check for real, and undoes what it made.
pub fn gather() -> Facts {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let binary = std::env::current_exe().ok();
    let file_caps = binary
        .as_deref()
        .and_then(|b| privilege::file_caps(b).ok().flatten());
    let effective_caps = privilege::current().map_or(0, |c| c.effective);
    let offsets = crate::kernel::ebpf::KernelBtf::read().map_err(|e| e.to_string());
    let ebpf = match (&offsets, root || host::can_load_ebpf()) {
        (Err(why), _) => Err(format!("cannot be loaded: no BTF ({why})")),
        (Ok(_), false) => Err("cannot be loaded: no privilege (see above)".into()),
        (Ok(offsets), true) => Probes::load(
            offsets,
            &crate::kernel::ebpf::Load {
                ring_buffer_bytes: 1 << 20,
                tracepoints: TracepointChoice::Auto,
                iter_later: false,
                tree_born_after_ns: 0,
                track_all: false,
            },
        )
        .map(|(mut probes, _ring)| {
            // Loaded now (not later): what the features table says of it.
            drop(probes.take_task_iter());
            (probes.mode.name().to_owned(), probes.load_ms)
        })
        .map_err(|e| format!("{e:#}")),
    };
    let mut cgroup_v2 = false;
    let cgroup = match RunCgroup::create(&format!("doctor-{}", std::process::id())) {
        Ok(cg) => {
            cgroup_v2 = cg.version() == crate::sampling::cgroup::CgroupVersion::V2;
            let what = format!("cgroup {:?} at {}", cg.version(), cg.path());
            let _ = cg.remove();
            Ok(what)
        }
        Err(err) => Err(err.to_string()),
    };
    let features = features::table(&features::Setting {
        load: match (&ebpf, features::loaded()) {
            (Ok(_), Some(loaded)) => Ok(loaded),
            (Err(why), _) => Err(why.clone()),
            (Ok(_), None) => Err("the load noted nothing".into()),
        },
        cgroup: cgroup.clone(),
        psi: features::psi_readable(),
        cgroup_v2,
    });
    let gpu = match GpuMonitor::open(GpuMode::Auto) {
        Ok(status) => match status.unavailable_reason() {
            Some(why) => Err(why),
            None => Ok(status.notice().unwrap_or_else(|| "monitored".into())),
        },
        Err(err) => Err(err.to_string()),
    };
    let agent = crate::follow::agent::socket_path().map(|(path, named)| AgentFacts {
        socket: path.display().to_string(),
        named,
        mode: crate::follow::agent::greet(&path)
            .map(|mode| mode.name().to_owned())
            .map_err(|e| format!("{e:#}")),
    });
    Facts {
        kernel: host::uname().1,
        root,
        effective_caps,
        binary,
        file_caps,
        btf: offsets.map(|_| ()),
        ebpf,
        cgroup,
        gpu,
        features,
        agent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            kernel: "6.18.44".into(),
            root: false,
            effective_caps: 0,
            binary: Some("/usr/local/bin/montrace".into()),
            file_caps: None,
            btf: Ok(()),
            ebpf: Err("cannot be loaded: no privilege (see above)".into()),
            cgroup: Err("Permission denied".into()),
            gpu: Err("no NVIDIA driver library".into()),
            features: Vec::new(),
            agent: None,
        }
    }

    #[test]
    fn an_agent_gives_an_ordinary_user_exact_tracking_and_a_failing_one_is_said() {
        let agent = AgentFacts {
            socket: "/run/montrace/agent.sock".into(),
            named: false,
            mode: Ok("tp_btf".into()),
        };
        let f = Facts {
            agent: Some(agent.clone()),
            ..facts()
        };
        let (checks, verdict) = judge(&f);
        let line = checks.iter().find(|c| c.what == "agent").unwrap();
        assert!(
            line.ok && line.detail.contains("exact (tp_btf)"),
            "{line:?}"
        );
        assert!(
            verdict.contains(
                "exact tracking through the montrace agent at /run/montrace/agent.sock (tp_btf)"
            ),
            "{verdict}"
        );
        // Root, who loads its own, uses the default socket's agent only where it is named.
        let root = Facts {
            root: true,
            ebpf: Ok(("tp_btf".into(), 30.0)),
            agent: Some(agent.clone()),
            ..facts()
        };
        assert!(judge(&root).1.contains("with eBPF (tp_btf)"));
        let named = Facts {
            agent: Some(AgentFacts {
                named: true,
                ..agent.clone()
            }),
            ..root
        };
        assert!(judge(&named).1.contains("through the montrace agent"));
        // A named agent that does not answer: a run fails, and the doctor says so.
        let gone = Facts {
            agent: Some(AgentFacts {
                named: true,
                mode: Err("connection refused".into()),
                ..agent.clone()
            }),
            ..facts()
        };
        let (checks, verdict) = judge(&gone);
        assert!(!checks.iter().find(|c| c.what == "agent").unwrap().ok);
        assert!(verdict.contains("fails"), "{verdict}");
        // One at the default socket that does not answer: the run polls.
        let stale = Facts {
            agent: Some(AgentFacts {
                mode: Err("connection refused".into()),
                ..agent
            }),
            ..facts()
        };
        assert!(judge(&stale).1.contains("polling"));
    }

    #[test]
    fn an_ordinary_user_without_the_grant_is_told_how() {
        let (checks, verdict) = judge(&facts());
        let privilege = checks.iter().find(|c| c.what == "privilege").unwrap();
        assert!(!privilege.ok);
        assert!(
            privilege.detail.contains("sudo montrace setcap"),
            "{privilege:?}"
        );
        assert!(verdict.contains("polling"), "{verdict}");
    }

    #[test]
    fn the_granted_binary_gives_exact_tracking() {
        let caps = (1 << privilege::CAP_BPF) | (1 << privilege::CAP_PERFMON);
        let f = Facts {
            effective_caps: caps,
            file_caps: Some(caps),
            ebpf: Ok(("tp_btf".into(), 120.0)),
            ..facts()
        };
        let (checks, verdict) = judge(&f);
        let privilege = checks.iter().find(|c| c.what == "privilege").unwrap();
        assert!(privilege.ok);
        assert!(
            privilege.detail.contains("CAP_PERFMON, CAP_BPF"),
            "{privilege:?}"
        );
        assert!(
            verdict.contains("exact tracking with eBPF (tp_btf)"),
            "{verdict}"
        );
        let cgroup = checks.iter().find(|c| c.what == "run cgroup").unwrap();
        assert!(!cgroup.ok && cgroup.detail.contains("no CPU coverage"));
    }
}
