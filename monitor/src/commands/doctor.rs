//! `montrace doctor`: the checks, what a run gets on this kernel, and the verdict, on stdout
//! ([`crate::doctor`] makes and judges them).
use super::Exit;
use crate::{doctor, kernel::features};

pub fn doctor() -> Exit {
    let facts = doctor::gather();
    let (checks, verdict) = doctor::judge(&facts);
    for c in &checks {
        crate::say_out!(
            "{:<14} {:<3} {}",
            c.what,
            if c.ok { "ok" } else { "no" },
            c.detail
        );
    }
    crate::say_out!("\nWhat a run gets on this kernel ({}):", facts.kernel);
    crate::say_out!("{}", features::render(&facts.features).trim_end());
    crate::say_out!("\n{verdict}");
    Ok(0)
}
