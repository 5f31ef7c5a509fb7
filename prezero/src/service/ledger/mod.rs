//! The ledger: every segment the daemon has, which state it is in and who is
//! charged for it. `model.rs` is the pure model (the states, the charges,
//! which pool serves a request, the transitions), explored exhaustively in
//! `tests.rs`.

mod model;

pub(crate) use model::{Clean, Ledger, Refused, Shape, State};
