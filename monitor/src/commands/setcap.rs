//! `montrace setcap [PATH]`: the install-time grant of CAP_BPF and CAP_PERFMON (see
//! `privilege`).
use super::{CommandError, Exit};
use crate::{cli::SetcapArgs, kernel::privilege};

pub fn setcap(args: SetcapArgs) -> Exit {
    let path = match args.path {
        Some(path) => path,
        None => std::env::current_exe()?,
    };
    // The file itself, not a link to it: capabilities live on the inode that is executed.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    match privilege::grant(&path) {
        Ok(caps) => {
            crate::say_out!(
                "montrace: {} now has {}: every user of this machine gets exact tracking of their \
                 own commands with `montrace run -- CMD`, without sudo (`montrace doctor` checks)",
                path.display(),
                privilege::names(caps).join(" and ")
            );
            Ok(0)
        }
        Err(
            err @ (privilege::GrantError::NotRoot(_) | privilege::GrantError::NotMontrace { .. }),
        ) => Err(CommandError::usage(err)),
        // Said as the grant says it (its own text, not a chain of causes).
        Err(err) => Err(CommandError::Failed(anyhow::anyhow!("{err}"))),
    }
}
