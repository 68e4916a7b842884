//! Section 13: the resident agent (issue 33) beside the standalone mode, in one run: start-up
//! (`startup_ms`, montrace's start to the command's exec) and the wall a run adds (the whole
//! `montrace run -- /bin/true` less `/bin/true` alone, started the same way), for root loading
//! its own programs, root through the agent, and an ordinary user's copy of the binary without
//! any capability through the agent. The three and the two bare runs they are compared with are
//! interleaved, run after run, so that a neighbour's load falls on all alike.
use super::report::{met_word, Figure, Section};
use super::stats::{median, min_max, sig};
use super::tools::{self, opt_num, read_json};
use super::Ctx;
use anyhow::{bail, Context as _, Result};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The targets: from `montrace run` to the command's exec, and the wall a run adds.
const STARTUP_TARGET_MS: f64 = 2.0;
const ADDED_WALL_TARGET_MS: f64 = 5.0;

/// How each kind of run is made.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Standalone,
    RootAgent,
    UserAgent,
}

const WAYS: [(Way, &str); 3] = [
    (
        Way::Standalone,
        "root, programs loaded by the run (standalone)",
    ),
    (Way::RootAgent, "root, through the agent"),
    (
        Way::UserAgent,
        "ordinary user, uncapable copy, through the agent",
    ),
];

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) of our child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

pub fn measure(ctx: &Ctx) -> Result<Vec<Section>> {
    let t = &ctx.tools;
    ctx.progress("13. resident agent: starting `montrace agent`");
    let dir = t.work.join("resident");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("runs"))?;
    // Every user reaches the directory, writes the runs' folder, and runs the copy.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(dir.join("runs"), std::fs::Permissions::from_mode(0o1777))?;
    let plain = dir.join("montrace-plain");
    std::fs::copy(&t.montrace, &plain)?;
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755))?;
    for above in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(above)?.permissions().mode();
        if mode & 0o001 == 0 {
            bail!(
                "{} is not searchable by other users: the user's runs of section 13 need it",
                above.display()
            );
        }
    }
    let socket = dir.join("agent.sock");
    let _agent = Agent(
        Command::new(&t.montrace)
            .arg("agent")
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting montrace agent")?,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!("montrace agent made no socket at {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reps = ctx.plan.reps * 6;
    let mut startup: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    // `/bin/true` alone, as root and as the user, started as the runs are.
    let mut bare: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut modes: Vec<String> = vec![String::new(); WAYS.len()];
    ctx.progress(&format!(
        "13. resident agent: {reps} runs of `montrace run -- /bin/true` each way and of \
         `/bin/true` alone, interleaved"
    ));
    for rep in 0..reps {
        for (b, user) in [(0, false), (1, true)] {
            bare[b].push(tools::run(&bare_argv(user, &socket))?.wall_s * 1e3);
        }
        for (i, (way, _)) in WAYS.iter().enumerate() {
            let out = dir.join("runs").join(format!("{rep:03}-{i}"));
            let argv = argv(*way, &t.montrace, &plain, &socket, &out);
            let ran = tools::run(&argv)?;
            let info = read_json(&out.join("run.json"))?;
            wall[i].push(ran.wall_s * 1e3);
            if let Some(ms) = opt_num(&info, "/startup_ms") {
                startup[i].push(ms);
            }
            modes[i] = info["tracking_mode"].as_str().unwrap_or("?").to_string();
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    // Each run less the bare run of its round, started the same way.
    let added: Vec<Vec<f64>> = WAYS
        .iter()
        .enumerate()
        .map(|(i, (way, _))| {
            let base = &bare[usize::from(*way == Way::UserAgent)];
            wall[i].iter().zip(base).map(|(w, b)| w - b).collect()
        })
        .collect();
    Ok(vec![section(
        ctx,
        reps,
        &startup,
        &Walls {
            whole: wall,
            added,
            bare,
        },
        &modes,
    )])
}

/// The whole runs' wall, what they added to `/bin/true` alone, and `/bin/true` alone (root,
/// user), ms.
struct Walls {
    whole: Vec<Vec<f64>>,
    added: Vec<Vec<f64>>,
    bare: [Vec<f64>; 2],
}

/// `/bin/true` started as [`argv`] starts the runs, as root or as the user, without montrace.
fn bare_argv(user: bool, socket: &Path) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    if user {
        argv.extend(SETPRIV.iter().map(|a| a.to_string()));
    }
    argv.extend([
        "env".into(),
        format!("MONTRACE_AGENT_SOCKET={}", socket.display()),
        "/bin/true".into(),
    ]);
    argv
}

/// How the user's runs become user `nobody`.
const SETPRIV: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

fn argv(way: Way, montrace: &Path, plain: &Path, socket: &Path, out: &Path) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    let socket = socket.display().to_string();
    match way {
        Way::Standalone => argv.extend(["env".into(), "MONTRACE_AGENT_SOCKET=".into()]),
        Way::RootAgent => argv.extend(["env".into(), format!("MONTRACE_AGENT_SOCKET={socket}")]),
        Way::UserAgent => {
            argv.extend(SETPRIV.iter().map(|a| a.to_string()));
            argv.extend(["env".into(), format!("MONTRACE_AGENT_SOCKET={socket}")]);
        }
    }
    let bin = if way == Way::UserAgent {
        plain
    } else {
        montrace
    };
    argv.extend([
        bin.display().to_string(),
        "run".into(),
        "-q".into(),
        "--no-report".into(),
        "--out".into(),
        out.display().to_string(),
        "--".into(),
        "/bin/true".into(),
    ]);
    argv
}

fn section(
    ctx: &Ctx,
    reps: usize,
    startup: &[Vec<f64>],
    walls: &Walls,
    modes: &[String],
) -> Section {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{} ms", sig(v, 3)));
    let range = |v: &[f64]| {
        min_max(v).map_or("n/a".to_string(), |(lo, hi)| {
            format!("{}–{} ms", sig(lo, 3), sig(hi, 3))
        })
    };
    let mut s = Section {
        id: "resident".into(),
        title: "13. The resident agent beside the standalone mode".into(),
        method: format!(
            "`montrace run -q --no-report -- /bin/true`, {reps} times each way, the three ways \
             and `/bin/true` alone interleaved run after run: root loading its own programs; \
             root through `montrace agent` (`MONTRACE_AGENT_SOCKET`); user `nobody` running a \
             copy of the binary with no capability through the agent. Start-up: run.json's \
             `startup_ms` (montrace's start to the command's exec; the run cgroup, which root \
             makes and `nobody` may not, included). Added wall: the whole run, timed around the \
             process (the tables, run.json and summary.json written), less `/bin/true` alone \
             started the same way (through `env`, and `setpriv` for the user) in the same \
             round: {} as root, {} as the user (medians). Plan: {} reps a figure.",
            ms(median(&walls.bare[0])),
            ms(median(&walls.bare[1])),
            ctx.plan.reps
        ),
        columns: vec![
            "way".into(),
            "tracking".into(),
            "start-up median".into(),
            "start-up min–max".into(),
            "added wall median".into(),
            "added wall min–max".into(),
            "whole run median".into(),
        ],
        ..Section::default()
    };
    for (i, (_, label)) in WAYS.iter().enumerate() {
        s.rows.push(vec![
            (*label).into(),
            format!("`{}`", modes[i]),
            ms(median(&startup[i])),
            range(&startup[i]),
            ms(median(&walls.added[i])),
            range(&walls.added[i]),
            ms(median(&walls.whole[i])),
        ]);
    }
    let user_startup = median(&startup[2]);
    let startup_met = user_startup.is_some_and(|v| v <= STARTUP_TARGET_MS);
    let user_added = median(&walls.added[2]);
    let added_met = user_added.is_some_and(|v| v <= ADDED_WALL_TARGET_MS);
    s.figures = figures(startup, walls, startup_met, added_met);
    s.notes.push(format!(
        "Through the agent, for an ordinary user: start-up {} ({} the {STARTUP_TARGET_MS} ms \
         target), added wall {} ({} the {ADDED_WALL_TARGET_MS} ms target); standalone, as root: \
         start-up {}, added wall {}.",
        ms(user_startup),
        met_word(startup_met),
        ms(user_added),
        met_word(added_met),
        ms(median(&startup[0])),
        ms(median(&walls.added[0])),
    ));
    s
}

/// The figures of section 13: each way's start-up, added wall and whole run, and the bare runs.
fn figures(startup: &[Vec<f64>], walls: &Walls, startup_met: bool, added_met: bool) -> Vec<Figure> {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{} ms", sig(v, 3)));
    let mut figures = Vec::new();
    let keys = [(0, "standalone"), (1, "root_agent"), (2, "user_agent")];
    for (i, key) in keys {
        let mut figure = Figure::new(
            &format!("resident.{key}_startup_ms"),
            &format!("start-up, {}", WAYS[i].1),
            "ms",
            median(&startup[i]),
            ms(median(&startup[i])),
        )
        .runs(startup[i].clone());
        if i == 2 {
            figure = figure.target(&format!("≤ {STARTUP_TARGET_MS} ms"), startup_met);
        }
        figures.push(figure);
    }
    for (i, key) in keys {
        let mut figure = Figure::new(
            &format!("resident.{key}_added_wall_ms"),
            &format!("wall added to /bin/true, {}", WAYS[i].1),
            "ms",
            median(&walls.added[i]),
            ms(median(&walls.added[i])),
        )
        .runs(walls.added[i].clone());
        if i == 2 {
            figure = figure.target(&format!("≤ {ADDED_WALL_TARGET_MS} ms"), added_met);
        }
        figures.push(figure);
    }
    for (i, key) in keys {
        figures.push(
            Figure::new(
                &format!("resident.{key}_wall_ms"),
                &format!("whole run of /bin/true, {}", WAYS[i].1),
                "ms",
                median(&walls.whole[i]),
                ms(median(&walls.whole[i])),
            )
            .runs(walls.whole[i].clone()),
        );
    }
    for (b, who) in [(0, "root"), (1, "user")] {
        figures.push(
            Figure::new(
                &format!("resident.bare_{who}_wall_ms"),
                &format!("/bin/true alone, as {who}"),
                "ms",
                median(&walls.bare[b]),
                ms(median(&walls.bare[b])),
            )
            .runs(walls.bare[b].clone()),
        );
    }
    figures
}
