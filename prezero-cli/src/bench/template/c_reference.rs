//! The shared C reference (template in registers,
//! `src/bench/c/template_reference.c`, built by build.rs with gcc -O2),
//! adapted to this bench's record: which variant this CPU runs, and the fill.

use super::model::{Layout, Page, ORDER_WORD, START_PFN};

#[cfg(template_reference)]
extern "C" {
    fn pz_ref_fill_avx2(
        dst: *mut Page,
        n: usize,
        head: *const Page,
        tail: *const Page,
        grouped: libc::c_int,
        start_pfn: u64,
        order_word: u64,
    );
    fn pz_ref_fill_sse2(
        dst: *mut Page,
        n: usize,
        head: *const Page,
        tail: *const Page,
        grouped: libc::c_int,
        start_pfn: u64,
        order_word: u64,
    );
}

/// The variant this CPU (as `PREZERO_CPU` leaves it) runs and how it was
/// built, or why there is none.
pub fn variant() -> Result<String, &'static str> {
    let built = env!("PREZERO_TEMPLATE_REFERENCE");
    if !cfg!(template_reference) {
        return Err(built);
    }
    let f = &prezero::cpu().features;
    if f.avx2 {
        Ok(format!("avx2, {built}"))
    } else if f.sse2 {
        Ok(format!("sse2, {built}"))
    } else {
        Err("the CPU in use has neither AVX2 nor SSE2")
    }
}

/// Fills `dst` as template-words does. pre: `variant()` is Ok.
#[cfg_attr(not(template_reference), allow(unused_variables))]
pub fn fill(layout: Layout, dst: &mut [Page], head: &Page, tail: &Page) {
    #[cfg(template_reference)]
    {
        let grouped = libc::c_int::from(layout == Layout::Groups2m);
        let f = if prezero::cpu().features.avx2 {
            pz_ref_fill_avx2
        } else {
            pz_ref_fill_sse2
        };
        // SAFETY: dst holds dst.len() 64-byte records, 64-byte aligned (Page's
        // alignment), as the streaming stores need; head and tail are
        // 64 bytes each; the CPU runs the variant (checked by `variant`).
        unsafe {
            f(
                dst.as_mut_ptr(),
                dst.len(),
                head,
                tail,
                grouped,
                START_PFN,
                ORDER_WORD,
            )
        };
    }
    #[cfg(not(template_reference))]
    unreachable!("the C reference is only measured where it was built");
}
