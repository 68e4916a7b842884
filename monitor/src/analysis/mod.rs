//! What is made of a recorded run: the report (`report`), the CI gate (`compare`) and the
//! exports (`export`). Pure over the run directory's data; only their `*_main` entry points
//! touch files.
pub mod compare;
pub mod export;
pub mod report;
