//! The harness of `damaged_images.rs`, by job: the worker's guards, the
//! base images, the cases, running one case, and the supervisor with the
//! jobs it hands its workers.

pub mod bases;
pub mod cases;
pub mod jobs;
pub mod run;
pub mod watch;
