//! The address space: realloc by mremap and the count of mappings.

use super::*;

#[test]
fn realloc_by_mremap_leaves_no_hole_for_other_threads() {
    let Some(b) = built() else { return };
    let _s = serial();
    run(b, &["mremap-race", "2"], &[LOW, STATS], true).ok();
    run(b, &["mremap-race", "1"], &[LOW, ("PREZERO_THP", "0")], true).ok();
}

#[test]
fn realloc_churn_keeps_the_mappings_few() {
    let Some(b) = built() else { return };
    let _s = serial();
    let r = run(b, &["vmas", "20000"], &[LOW, STATS], true);
    r.ok();
    let before = number_after(&r.stdout, "vmas:");
    let after = number_after(&r.stdout, "before,");
    assert!(
        after - before < 600.0,
        "{before} mappings became {after}: every move leaves mappings behind (vm.max_map_count is 65530)"
    );
    assert!(r.stats().remaps > 100);
}
