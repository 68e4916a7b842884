//! Runs from many machines in one dataset: each run's context and id ([`context`]), and the
//! publishing of run directories as a Hive-partitioned dataset ([`publish`]), and the batch
//! jobs a run belongs to ([`slurm`]).
pub mod context;
pub mod dataset;
pub mod otlp;
pub mod publish;
pub mod slurm;
