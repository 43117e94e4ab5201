//! The chaos soak (`cargo xtask soak`): the real agent against the
//! stand-in apiserver, 50 Services with identity backends in pod network
//! namespaces, clients in theirs making TCP short connections and UDP
//! requests without pause, while Deployments roll, the agent is SIGKILLed
//! and restarted, the apiserver goes down or forces a relist, and Services
//! come and go. It reports requests attempted and failed by cause, the
//! time to converge after each change, and the agent's RSS, open fds and
//! map entries over time; it fails if a request to a Service that had a
//! serving endpoint failed, if an answer came from a backend that was not
//! serving its Service, or if the maps end up holding more than the live
//! Services need. The long soak (`Mode::Long`) keeps one agent for the
//! whole run instead, and fails if its RSS, open fds or the maps' entries
//! beyond need grew (`flatness`).
//!
//! Files: `plan` (durations, scaled for short runs), `world` (the
//! objects), `pods` and `clients` (the processes in namespaces), `wire`
//! (what the clients say), `converge` and `observe` (reading the maps),
//! `tasks`, `tracks` and `changes` (the disturbances), `run`, `outcome`
//! and `report`.

mod changes;
mod clients;
pub mod converge;
mod cx;
pub mod flatness;
pub mod observe;
pub mod outcome;
pub mod plan;
mod pods;
pub mod report;
mod run;
mod tasks;
mod tracks;
pub mod wire;
pub mod world;

pub use run::run;
