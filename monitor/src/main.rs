use clap::Parser as _;
use monitor::cli::{Cli, Command, EXIT_MONTRACE_FAILED};

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => monitor::run::run(args),
        Command::Attach(args) => monitor::attach::attach_main(args),
        Command::Compare(args) => monitor::compare::compare_main(args),
        Command::Mark(args) => monitor::marks::mark_main(args),
        Command::Report(args) => monitor::report::report_main(args),
        Command::Export(args) => monitor::export::export_main(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            monitor::say!("montrace: error: {err:#}");
            std::process::exit(EXIT_MONTRACE_FAILED);
        }
    }
}
