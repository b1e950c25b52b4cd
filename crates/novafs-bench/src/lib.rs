//! The comparison harness as a library: the workloads of the NOVA paper's
//! evaluation written once against a [`backend::Backend`], the targets
//! they run on ([`target`]), and the reports. The `novafs-bench` binary
//! runs them all beside kernel file systems and draws the plots (its own
//! `plot` module, so that `novafs` links this library without plotters);
//! `novafs bench` runs the §5.2 microbenchmark ([`workload::micro`]), the
//! DRAM measurement ([`memory`]) and the recovery timing
//! ([`workload::time_mounts`]) on the library target alone, and FGM's
//! workloads ([`fgm`]) and TxnInfo size sweep ([`txninfo`]) there too, and
//! ages an image ([`aged`]) for NOVA-Fortis's space breakdown and its
//! scribble measure ([`scribble`]). A benchmark,
//! not a test. Through a FUSE mount, the personalities also count the
//! requests the daemon served ([`requests`]).

#![forbid(unsafe_code)]

pub mod aged;
pub mod backend;
pub mod fgm;
pub mod fio;
pub mod fullfs;
pub mod memory;
pub mod personality;
pub mod report;
pub mod requests;
pub mod scribble;
pub mod stats;
pub mod svg;
pub mod target;
pub mod tools;
pub mod txninfo;
pub mod workload;
