//! `prezero serve` end to end: each test starts its own daemon on a temporary
//! socket, with 2 MiB hugetlb pages it reserves and gives back, and checks what
//! the issue asks: every byte zero, isolation between tenants, authorization and
//! caps, robustness against bad clients, no leak, no stall.
//!
//! Tests skip (printing why) when the hugetlb pages cannot be reserved (not
//! root, or no memory); the reservation also makes them run one at a time.
//!
//! The scenarios, by what they check: `isolation` (every byte zero, a segment
//! kept out of reuse while anyone holds it, who is served and within what cap),
//! `clients` (bad, killed and many clients), `daemon` (its start, its limits,
//! its worker's priority, 1 GiB pages), `stats` (pools by shape, STATS and the
//! metrics file).

#[path = "../common/mod.rs"]
mod common;

mod clients;
mod daemon;
mod isolation;
mod stats;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use prezero::PageKind;
use prezero_service::protocol::{self, Request};
use prezero_service::{Client, Source};
