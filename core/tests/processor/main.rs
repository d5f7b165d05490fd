//! The partition processor's rules driven directly, with the simulation's scripted workflows:
//! inputs in, effects out, no log and no store. One module per concern of the processor, around
//! the shared fixtures.

mod fixtures;

mod admit;
mod batches;
mod cache;
mod cancel;
mod concurrency;
mod corrupt_state;
mod deliver;
mod events;
mod pause;
mod query;
mod reset;
mod run;
mod schedules;
mod stubs;
mod submit;
mod upgrades;
