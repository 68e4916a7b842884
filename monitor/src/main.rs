use monitor::cli::{Cli, Command};
use monitor::commands::{self, CommandError, Exit};
use monitor::store::userfs;

/// The static (musl) build allocates through jemalloc: see monitor/Cargo.toml.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Every error of every subcommand is said here, once, with its exit status.
fn main() {
    let cli = Cli::parse_command_line();
    let result = drop_unneeded_capabilities(&cli.command)
        .and_then(|()| guard_capabilities())
        .and_then(|()| take_owner(&cli.command))
        .map_err(CommandError::from)
        .and_then(|()| dispatch(cli.command));
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            monitor::say!("{}", err.line());
            err.exit_code()
        }
    };
    exit(code)
}

/// Ends the process with `code`. Where NVML is still opening on its thread (a run done before
/// it opened does not wait for it: `follow::end::GpuOpening`), no exit handler or library
/// destructor may run beside that thread: stdout and stderr are flushed, and the process ends
/// with `_exit`. Every file of the run is written and closed by now.
fn exit(code: i32) -> ! {
    if monitor::follow::end::nvml_left_opening() {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: _exit has no preconditions; it ends the process at once.
        unsafe { libc::_exit(code) }
    }
    std::process::exit(code)
}

/// Only `run`, `attach` and `slurm task` (a `run`) load eBPF programs (and `doctor` tries to, to say what a run would get;
/// `setcap` is root's, and sets file capabilities): every other subcommand of the granted binary
/// lets its capabilities go before it does anything, so that reading a Parquet file the command
/// wrote (C zstd), a report, a publish, never runs with CAP_BPF or CAP_PERFMON. (`bench` starts
/// `montrace run` anew for each repetition, whose exec takes the file's capabilities again.)
/// Root keeps its own: its privilege is its uid, and the as-user switch of the file identity
/// (`userfs`) needs CAP_SETUID.
fn drop_unneeded_capabilities(command: &Command) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let needs = matches!(
        command,
        Command::Run(_)
            | Command::Attach(_)
            | Command::Slurm(_)
            | Command::Doctor
            | Command::Setcap(_)
    );
    // SAFETY: geteuid has no preconditions.
    if needs || unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    monitor::kernel::privilege::drop_all().context("dropping capabilities montrace does not need")
}

/// A granted binary run by an ordinary user is out of that user's reach (ptrace, /proc/PID/fd)
/// from its first instruction to its exit, after its capabilities are gone too
/// (`privilege::make_undumpable`).
fn guard_capabilities() -> anyhow::Result<()> {
    use anyhow::Context as _;
    if monitor::kernel::privilege::capable_user() {
        monitor::kernel::privilege::make_undumpable()
            .context("making montrace non-dumpable, so that the user cannot ptrace it")?;
    }
    Ok(())
}

fn dispatch(command: Command) -> Exit {
    match command {
        Command::Run(args) => commands::run::run(args),
        Command::Attach(args) => commands::attach::attach(args),
        // These need no privilege at all: under sudo they run with the user's filesystem
        // identity throughout, so every path they are given is opened as the user would.
        Command::Compare(args) => as_user(|| commands::compare::compare(args)),
        // Each repetition is a `montrace run` of its own (privilege handled there); the
        // directories and the verdict are the user's.
        Command::Bench(args) => commands::bench::bench(args),
        Command::Publish(args) => as_user(|| commands::publish::publish(args)),
        Command::Report(args) => as_user(|| commands::report::report(args)),
        Command::Export(args) => as_user(|| commands::export::export(args)),
        Command::Mark(args) => commands::mark::mark(args),
        Command::Setcap(args) => commands::setcap::setcap(args),
        Command::Agent(args) => commands::agent::agent(args),
        // A job's task, as the job's user: recorded as `run` (privilege handled there).
        Command::Slurm(args) => commands::slurm::slurm(args),
        Command::History(args) => commands::history::history(args),
        Command::Doctor => commands::doctor::doctor(),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "montrace", &mut text);
            print_bytes(&text)
        }
        Command::Man(args) => man(args),
    }
}

/// `montrace man`: the page of montrace or of one subcommand on stdout, or every page into a
/// directory. The top page's SEE ALSO names montrace-run(1) and the others: they exist.
fn man(args: monitor::cli::ManArgs) -> Exit {
    use clap::CommandFactory as _;
    let mut top = Cli::command().disable_help_subcommand(true);
    top.build();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir)
            .and_then(|()| clap_mangen::generate_to(top, &dir))
            .map_err(|e| {
                anyhow::anyhow!("cannot write the man pages into {}: {e}", dir.display())
            })?;
        println!("wrote the man pages into {}", dir.display());
        return Ok(0);
    }
    let page = match args.command {
        None => top,
        Some(name) => match top.find_subcommand(&name) {
            Some(sub) => sub.clone(),
            None => {
                let names: Vec<String> = top
                    .get_subcommands()
                    .map(|s| s.get_name().to_string())
                    .collect();
                return Err(CommandError::usage_line(format!(
                    "montrace man: error: no subcommand `{name}`; one of: {}",
                    names.join(", ")
                )));
            }
        },
    };
    let mut text = Vec::new();
    clap_mangen::Man::new(page).render(&mut text)?;
    print_bytes(&text)
}

/// Writes generated text to stdout; a reader that stops early (`| head`) is no error.
fn print_bytes(text: &[u8]) -> Exit {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to stdout: {e}").into())
        }
        _ => Ok(0),
    }
}

/// Under sudo, the invoking user owns every file montrace reads or writes for them (see
/// `userfs`), unless `run --as-root` hands the whole run to root.
fn take_owner(command: &Command) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || matches!(command, Command::Run(args) if args.as_root) {
        return Ok(());
    }
    if let Some(id) = monitor::follow::launch::sudo_identity()? {
        userfs::set_owner(userfs::Owner {
            uid: id.uid,
            gid: id.gid,
            groups: id.groups,
        })?;
    }
    Ok(())
}

fn as_user(f: impl FnOnce() -> Exit) -> Exit {
    let mut result = None;
    userfs::as_user(|| {
        result = Some(f());
        Ok(())
    })?;
    result.expect("as_user ran the command")
}
