/*
 * The shared C reference for `prezero bench template`
 * (machines/amd-zen3-avx2-clzero/template-avx2-prototype.c), adapted to the
 * bench's record: 64 bytes, three varying words (lru.next and lru.prev at
 * bytes 8 and 16, the pfn at byte 32), head and tail templates in groups of
 * 512 for the 2m-groups layout. As in the prototype, the template is held in
 * registers, the words are inserted with constant lanes, each record is
 * streamed with whole-line stores, and one sfence drains. Built with gcc -O2
 * (build.rs). An SSE2 variant (four 16-byte streams) is the reference where
 * AVX2 is absent or masked off.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define GROUP 512

__attribute__((target("avx2"))) void pz_ref_fill_avx2(void *dst, size_t n, const void *head,
						      const void *tail, int grouped,
						      uint64_t start_pfn, uint64_t order_word)
{
	char *b = dst;
	__m256i hlo = _mm256_loadu_si256((const __m256i *)head);
	__m256i hhi = _mm256_loadu_si256((const __m256i *)head + 1);
	__m256i tlo = _mm256_loadu_si256((const __m256i *)tail);
	__m256i thi = _mm256_loadu_si256((const __m256i *)tail + 1);
	for (size_t i = 0; i < n; i++) {
		char *r = b + i * 64;
		int is_tail = grouped && (i % GROUP) != 0;
		uint64_t w1, w2;
		__m256i lo, hi;
		if (is_tail) {
			w1 = (uint64_t)(b + (i - i % GROUP) * 64) | 1;
			w2 = order_word;
			lo = tlo;
			hi = thi;
		} else {
			w1 = w2 = (uint64_t)r + 8;
			lo = hlo;
			hi = hhi;
		}
		lo = _mm256_insert_epi64(lo, (long long)w1, 1);
		lo = _mm256_insert_epi64(lo, (long long)w2, 2);
		hi = _mm256_insert_epi64(hi, (long long)(start_pfn + i), 0);
		_mm256_stream_si256((__m256i *)r, lo);
		_mm256_stream_si256((__m256i *)(r + 32), hi);
	}
	_mm_sfence();
}

void pz_ref_fill_sse2(void *dst, size_t n, const void *head, const void *tail, int grouped,
		      uint64_t start_pfn, uint64_t order_word)
{
	char *b = dst;
	const __m128i *h = head, *t = tail;
	__m128i h0 = _mm_loadu_si128(h), h1 = _mm_loadu_si128(h + 1);
	__m128i h2 = _mm_loadu_si128(h + 2), h3 = _mm_loadu_si128(h + 3);
	__m128i t0 = _mm_loadu_si128(t), t1 = _mm_loadu_si128(t + 1);
	__m128i t2 = _mm_loadu_si128(t + 2), t3 = _mm_loadu_si128(t + 3);
	for (size_t i = 0; i < n; i++) {
		char *r = b + i * 64;
		int is_tail = grouped && (i % GROUP) != 0;
		uint64_t w1, w2;
		__m128i q0, q1, q2, q3;
		if (is_tail) {
			w1 = (uint64_t)(b + (i - i % GROUP) * 64) | 1;
			w2 = order_word;
			q0 = t0, q1 = t1, q2 = t2, q3 = t3;
		} else {
			w1 = w2 = (uint64_t)r + 8;
			q0 = h0, q1 = h1, q2 = h2, q3 = h3;
		}
		/* word 1 is the high half of q0, word 2 the low half of q1, word 4 the low half of q2 */
		q0 = _mm_unpacklo_epi64(q0, _mm_cvtsi64_si128((long long)w1));
		q1 = _mm_castpd_si128(_mm_move_sd(_mm_castsi128_pd(q1),
						  _mm_castsi128_pd(_mm_cvtsi64_si128((long long)w2))));
		q2 = _mm_castpd_si128(_mm_move_sd(_mm_castsi128_pd(q2),
						  _mm_castsi128_pd(_mm_cvtsi64_si128((long long)(start_pfn + i)))));
		_mm_stream_si128((__m128i *)r, q0);
		_mm_stream_si128((__m128i *)(r + 16), q1);
		_mm_stream_si128((__m128i *)(r + 32), q2);
		_mm_stream_si128((__m128i *)(r + 48), q3);
	}
	_mm_sfence();
}
