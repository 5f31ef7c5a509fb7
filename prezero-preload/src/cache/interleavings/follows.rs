//! The model's steps against the code: each [`super::Pc`] names the lines it
//! stands for, and this fails if they are no longer there in that order.

use prezero::interleavings::in_order;

/// The lines each step stands for are still in the order the model takes them.
#[test]
fn the_model_follows_the_code() {
    let requests = include_str!("../requests.rs");
    let range = include_str!("../range.rs");
    let scrubber = include_str!("../scrubber.rs");
    let fork = include_str!("../fork.rs");
    in_order(
        requests,
        "pub(super) fn take(",
        &[
            "lock_unless_starved()",
            "return std::ptr::null_mut();",
            "let granted = loop {",
            "l.blocks.alloc_around_busy(size, align, zeroed, room)",
            "l.blocks.alloc(size, align, zeroed, room)",
            "Alloc::Wait =>",
            "WAITING.fetch_add(1, Ordering::Relaxed)",
            "g.wait_unless_starved(REQUEST_WAIT_MS)",
            "WAITING.fetch_sub(1, Ordering::Relaxed)",
            "None => return std::ptr::null_mut(),",
            "drop(g);",
            "clear_dirty(&pieces[..n], zeroed, counted)",
        ],
    );
    in_order(
        requests,
        "unsafe fn clear_dirty(",
        &["prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Hot)"],
    );
    in_order(
        requests,
        "pub extern \"C\" fn free(",
        &[
            "lock_unless_starved()",
            "deferred::leave(p)",
            "signal_all();",
            "return;",
            "free_deferred(&mut g);",
            "free_block(&mut g, p)",
            "while g.cache().held() > cap",
            "release_one(&mut g, u64::MAX)",
            "signal_all();",
            "drop(g);",
        ],
    );
    in_order(
        requests,
        "pub(super) fn free_deferred(",
        &["deferred::take_each(", "free_block(g, p)"],
    );
    in_order(requests, "fn free_block(", &["l.blocks.free(p, now())"]);
    in_order(
        range,
        "pub(super) fn release_one(",
        &[
            "release_take(before, RELEASE_CHUNK)",
            "g.unlocked(||",
            "sys::discard(s, l)",
            "c.blocks.busy_done(s, Kind::Fresh)",
            "c.blocks.busy_failed(s, now())",
            "signal_all();",
        ],
    );
    in_order(
        scrubber,
        "fn scrub(",
        &[
            "loop {",
            "free_deferred(&mut g);",
            "g.cache().held() > cap && release_one(&mut g, u64::MAX)",
            "release_one(&mut g, now().saturating_sub(",
            "if WAITING.load(Ordering::Relaxed) > 0",
            "g.wait_ms(1);",
            "scrub_take(SCRUB_CHUNK)",
            "drop(g);",
            "prezero::clear_raw_with(s as *mut u8, l, prezero::Temperature::Cold)",
            "g = lock_as_scrubber();",
            "busy_done(s, Kind::Clean)",
            "signal_all();",
            "g.wait_ms(CHECK_MS);",
        ],
    );
    in_order(
        fork,
        "pub(super) extern \"C\" fn before_fork(",
        &["SHARED.mutex.lock(PROGRAM)"],
    );
    in_order(
        fork,
        "pub(super) extern \"C\" fn in_child(",
        &[
            "lane.blocks.abandon_busy()",
            "WAITING.store(0, Ordering::Relaxed)",
            "SHARED.mutex.unlock()",
        ],
    );
}
