//! The ledger: every segment the daemon has, which state it is in and who is
//! charged for it, and the file that outlives the daemon. `model.rs` is the
//! pure model (the states, the charges, which pool serves a request, the
//! transitions), explored exhaustively in `tests.rs`; `file.rs` writes and
//! reads the ledger file; `adopt.rs` takes over, at start-up, the segments
//! a previous instance recorded there and processes still hold; `world.rs`
//! applies transitions to the model as the server would and checks each (for
//! the tests and the fuzz target `ledger`).

mod adopt;
mod file;
mod model;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod world;

pub(crate) use adopt::adopt;
pub(crate) use file::write_ledger;
#[cfg(feature = "fuzzing")]
pub(crate) use file::{ledger_text, parse_ledger};
pub(crate) use model::{Clean, Grant, Ledger, Refused, Shape, State};
