//! Section 13: the resident agent (issue 33) beside the standalone mode, in one run: start-up
//! (`startup_ms`, montrace's start to the command's exec) and the wall a run adds (the whole
//! `montrace run -- /bin/true` less `/bin/true` alone, started the same way), for root loading
//! its own programs, root through the agent, and an ordinary user's copy of the binary without
//! any capability through the agent: the release build, and the static binary of the release
//! tarball (`cargo xtask dist`), which is what a user who installs the tarball runs; each
//! started outside any git checkout, and the user's release build also in one (a run there waits
//! for git's status at its end). The five and the two bare runs they are compared with are
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

/// The pause before each run (see the section's method).
const GAP_MS: u64 = 50;

/// The targets: from `montrace run` to the command's exec, and the wall a run adds.
const STARTUP_TARGET_MS: f64 = 2.0;
const ADDED_WALL_TARGET_MS: f64 = 5.0;

/// How each kind of run is made.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Standalone,
    RootAgent,
    UserAgent,
    /// The user's copy is the release tarball's static (musl) binary.
    UserAgentStatic,
    /// As `UserAgent`, started in a git checkout (this repository's).
    UserAgentCheckout,
}

impl Way {
    fn is_user(self) -> bool {
        matches!(
            self,
            Way::UserAgent | Way::UserAgentStatic | Way::UserAgentCheckout
        )
    }

    /// Where the run is started: outside any git checkout, but for `UserAgentCheckout`. A run
    /// in a checkout asks git's status at its end (run.json's `context.git.dirty`), and waits
    /// for it: a cost of the user's checkout, shown apart.
    fn cwd(self) -> &'static Path {
        match self {
            Way::UserAgentCheckout => Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap(),
            _ => Path::new("/"),
        }
    }
}

const WAYS: [(Way, &str); 5] = [
    (
        Way::Standalone,
        "root, programs loaded by the run (standalone)",
    ),
    (Way::RootAgent, "root, through the agent"),
    (
        Way::UserAgent,
        "ordinary user, uncapable copy, through the agent",
    ),
    (
        Way::UserAgentStatic,
        "ordinary user, the release tarball's static binary, through the agent",
    ),
    (
        Way::UserAgentCheckout,
        "ordinary user, uncapable copy, through the agent, in a git checkout",
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
    let plain = user_copy(&t.montrace, dir.join("montrace-plain"))?;
    ctx.progress("13. resident agent: building the release tarball's static binary");
    let built = crate::dist::build_static(ctx.verbose)?;
    let static_copy = user_copy(&built, dir.join("montrace-static"))?;
    let copies = Copies {
        root: &t.montrace,
        plain: &plain,
        static_copy: &static_copy,
    };
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
    let spaced = rounds(ctx, reps, GAP_MS, &dir, &copies, &socket)?;
    let back_to_back = rounds(ctx, reps, 0, &dir, &copies, &socket)?;
    Ok(vec![section(ctx, reps, &spaced, &back_to_back)])
}

/// A copy of `bin` at `to` that every user may run (a copy holds no file capability).
fn user_copy(bin: &Path, to: std::path::PathBuf) -> Result<std::path::PathBuf> {
    std::fs::copy(bin, &to)?;
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
    Ok(to)
}

/// What `reps` rounds measured: each way's start-ups and walls, and its tracking mode.
struct Measured {
    startup: Vec<Vec<f64>>,
    walls: Walls,
    modes: Vec<String>,
}

/// `reps` rounds of `/bin/true` alone (as root, as the user) and through montrace each way,
/// each run started `gap_ms` after the one before ended.
fn rounds(
    ctx: &Ctx,
    reps: usize,
    gap_ms: u64,
    dir: &Path,
    copies: &Copies<'_>,
    socket: &Path,
) -> Result<Measured> {
    let mut startup: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); WAYS.len()];
    // `/bin/true` alone, as root and as the user, started as the runs are.
    let mut bare: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut modes: Vec<String> = vec![String::new(); WAYS.len()];
    ctx.progress(&format!(
        "13. resident agent: {reps} runs of `montrace run -- /bin/true` each way and of \
         `/bin/true` alone, interleaved, {gap_ms} ms apart"
    ));
    let gap = Duration::from_millis(gap_ms);
    for rep in 0..reps {
        for (b, user) in [(0, false), (1, true)] {
            std::thread::sleep(gap);
            bare[b].push(tools::run(&bare_argv(user, socket))?.wall_s * 1e3);
        }
        for (i, (way, _)) in WAYS.iter().enumerate() {
            let out = dir.join("runs").join(format!("{rep:03}-{i}"));
            let argv = argv(*way, copies, socket, &out);
            std::thread::sleep(gap);
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
            let base = &bare[usize::from(way.is_user())];
            wall[i].iter().zip(base).map(|(w, b)| w - b).collect()
        })
        .collect();
    Ok(Measured {
        startup,
        walls: Walls {
            whole: wall,
            added,
            bare,
        },
        modes,
    })
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
        "-C".into(),
        "/".into(),
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

/// The binaries the ways run: root's (the release build), and the user's copies of it and of
/// the tarball's static binary.
struct Copies<'a> {
    root: &'a Path,
    plain: &'a Path,
    static_copy: &'a Path,
}

fn argv(way: Way, copies: &Copies<'_>, socket: &Path, out: &Path) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    let socket = socket.display().to_string();
    if way.is_user() {
        argv.extend(SETPRIV.iter().map(|a| a.to_string()));
    }
    argv.extend(["env".into(), "-C".into(), way.cwd().display().to_string()]);
    match way {
        Way::Standalone => argv.push("MONTRACE_AGENT_SOCKET=".into()),
        _ => argv.push(format!("MONTRACE_AGENT_SOCKET={socket}")),
    }
    let bin = match way {
        Way::Standalone | Way::RootAgent => copies.root,
        Way::UserAgent | Way::UserAgentCheckout => copies.plain,
        Way::UserAgentStatic => copies.static_copy,
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

fn section(ctx: &Ctx, reps: usize, spaced: &Measured, back_to_back: &Measured) -> Section {
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
            "`montrace run -q --no-report -- /bin/true`, {reps} times each way, the five ways \
             and `/bin/true` alone interleaved run after run: root loading its own programs; \
             root through `montrace agent` (`MONTRACE_AGENT_SOCKET`); user `nobody` running a \
             copy of the binary with no capability through the agent, the release build \
             (glibc) and the release tarball's static (musl) binary, which is what a user who \
             installs the tarball runs. Each started in `/`, outside any git checkout, and the \
             user's release build also in this repository's checkout: a run in a checkout asks \
             git's status once its tree is done (run.json's `context.git.dirty`) and waits for \
             it, a cost of the checkout (here one of root's, which git, started as `nobody`, \
             refuses), shown apart. Twice: each run {GAP_MS} ms after the one before \
             ended (spaced, as runs by hand or from a script are), and back to back. Back to \
             back flatters: the machine's caches and CPUs stay warm, and a root run's move of \
             its command into the run cgroup (cgroup v1 here; on cgroup v2 the command is made \
             there, run.json `cgroup.entered`) finds the kernel's cgroup lock still ready from \
             the last move (root through the agent, 12 runs each on this machine: start-up \
             2.4 ms back to back, 16 ms with 20 ms or more between runs). Start-up: run.json's \
             `startup_ms` (montrace's start to the command's exec; the run cgroup, which root \
             makes and `nobody` may not, included). Added wall: the whole run, timed around the \
             process (the tables, run.json and summary.json written), less `/bin/true` alone \
             started the same way (through `env`, and `setpriv` for the user) in the same \
             round: spaced {} as root, {} as the user; back to back {} and {} (medians). The \
             targets are judged on the spaced runs. Plan: {} reps a figure.",
            ms(median(&spaced.walls.bare[0])),
            ms(median(&spaced.walls.bare[1])),
            ms(median(&back_to_back.walls.bare[0])),
            ms(median(&back_to_back.walls.bare[1])),
            ctx.plan.reps
        ),
        columns: vec![
            "way".into(),
            "runs".into(),
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
        for (spacing, m) in [("spaced", spaced), ("back to back", back_to_back)] {
            s.rows.push(vec![
                (*label).into(),
                spacing.into(),
                format!("`{}`", m.modes[i]),
                ms(median(&m.startup[i])),
                range(&m.startup[i]),
                ms(median(&m.walls.added[i])),
                range(&m.walls.added[i]),
                ms(median(&m.walls.whole[i])),
            ]);
        }
    }
    let user_startup = median(&spaced.startup[2]);
    let startup_met = user_startup.is_some_and(|v| v <= STARTUP_TARGET_MS);
    let user_added = median(&spaced.walls.added[2]);
    let added_met = user_added.is_some_and(|v| v <= ADDED_WALL_TARGET_MS);
    s.figures = figures(spaced, "", Some((startup_met, added_met)));
    s.figures
        .extend(figures(back_to_back, "_back_to_back", None));
    s.notes.push(format!(
        "Through the agent, for an ordinary user, spaced: start-up {} ({} the \
         {STARTUP_TARGET_MS} ms target), added wall {} ({} the {ADDED_WALL_TARGET_MS} ms \
         target); back to back: start-up {}, added wall {}. With the release tarball's static \
         binary, spaced: start-up {}, added wall {}. In a git checkout, spaced: start-up {}, \
         added wall {}. Standalone, as root, spaced: start-up {}, added wall {}.",
        ms(user_startup),
        met_word(startup_met),
        ms(user_added),
        met_word(added_met),
        ms(median(&back_to_back.startup[2])),
        ms(median(&back_to_back.walls.added[2])),
        ms(median(&spaced.startup[3])),
        ms(median(&spaced.walls.added[3])),
        ms(median(&spaced.startup[4])),
        ms(median(&spaced.walls.added[4])),
        ms(median(&spaced.startup[0])),
        ms(median(&spaced.walls.added[0])),
    ));
    s
}

/// The figures of section 13 for one spacing (`suffix` on their keys): each way's start-up,
/// added wall and whole run, and the bare runs; `targets` (start-up met, added wall met) marks
/// the ordinary user's figures.
fn figures(m: &Measured, suffix: &str, targets: Option<(bool, bool)>) -> Vec<Figure> {
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{} ms", sig(v, 3)));
    let spacing = match suffix {
        "" => "spaced",
        _ => "back to back",
    };
    let (startup, walls) = (&m.startup, &m.walls);
    let mut figures = Vec::new();
    let keys = [
        (0, "standalone"),
        (1, "root_agent"),
        (2, "user_agent"),
        (3, "user_agent_static"),
        (4, "user_agent_checkout"),
    ];
    for (i, key) in keys {
        let mut figure = Figure::new(
            &format!("resident.{key}_startup_ms{suffix}"),
            &format!("start-up, {} ({spacing})", WAYS[i].1),
            "ms",
            median(&startup[i]),
            ms(median(&startup[i])),
        )
        .runs(startup[i].clone());
        if let (2, Some((met, _))) = (i, targets) {
            figure = figure.target(&format!("≤ {STARTUP_TARGET_MS} ms"), met);
        }
        figures.push(figure);
    }
    for (i, key) in keys {
        let mut figure = Figure::new(
            &format!("resident.{key}_added_wall_ms{suffix}"),
            &format!("wall added to /bin/true, {} ({spacing})", WAYS[i].1),
            "ms",
            median(&walls.added[i]),
            ms(median(&walls.added[i])),
        )
        .runs(walls.added[i].clone());
        if let (2, Some((_, met))) = (i, targets) {
            figure = figure.target(&format!("≤ {ADDED_WALL_TARGET_MS} ms"), met);
        }
        figures.push(figure);
    }
    for (i, key) in keys {
        figures.push(
            Figure::new(
                &format!("resident.{key}_wall_ms{suffix}"),
                &format!("whole run of /bin/true, {} ({spacing})", WAYS[i].1),
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
                &format!("resident.bare_{who}_wall_ms{suffix}"),
                &format!("/bin/true alone, as {who} ({spacing})"),
                "ms",
                median(&walls.bare[b]),
                ms(median(&walls.bare[b])),
            )
            .runs(walls.bare[b].clone()),
        );
    }
    figures
}
