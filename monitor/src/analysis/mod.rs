//! What is made of a recorded run: the report (`report`), the CI gate (`compare`), interleaved
//! A/B measurement (`bench`), the exports (`export`), and where the time went (`critical`). Pure over the run directory's data; only their `*_main` entry points
//! touch files.
pub mod bench;
pub mod compare;
pub mod critical;
pub mod export;
pub mod report;
