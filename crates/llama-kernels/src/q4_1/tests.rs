//! The kernel against ggml's own dot product, bit for bit, on odd shapes and thread counts.

use super::*;

use llama_cpp_sys_2 as ggml;

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A half between about 1/256 and 1/2 in magnitude, of either sign when `signed`.
    fn half(&mut self, signed: bool) -> u16 {
        let bits = self.next();
        let exponent = 7 + (bits % 7) as u16;
        let mantissa = ((bits >> 8) & 0x3ff) as u16;
        let sign = if signed && bits & (1 << 40) != 0 {
            0x8000
        } else {
            0
        };
        sign | (exponent << 10) | mantissa
    }
}

fn weights(noise: &mut Noise, count: usize) -> Vec<BlockQ4_1> {
    (0..count)
        .map(|_| BlockQ4_1 {
            d: noise.half(false),
            m: noise.half(true),
            qs: std::array::from_fn(|_| noise.next() as u8),
        })
        .collect()
}

fn tokens(noise: &mut Noise, count: usize) -> Vec<BlockQ8_1> {
    (0..count)
        .map(|_| BlockQ8_1 {
            d: noise.half(false),
            s: noise.half(true),
            qs: std::array::from_fn(|_| ((noise.next() % 255) as i16 - 127) as i8),
        })
        .collect()
}

/// C from the kernel, with `threads` calls as ggml's threads would make them, against ggml's
/// dot product for every output; the padding between C's rows is left alone.
fn matches_ggml(shape: Shape, threads: usize, seed: u64) {
    matches_ggml_with(shape, seed, &format!("{threads} threads"), |a, b, c| {
        for ith in 0..threads {
            // SAFETY: the CPU has the features (asserted); the matrices have the shape's sizes.
            unsafe { gemm(ith, threads, shape, a, b, c) };
        }
    });
}

/// C from `compute` (given A, B and room for C), against ggml's dot product for every
/// output; the padding between C's rows is left alone.
fn matches_ggml_with(
    shape: Shape,
    seed: u64,
    how: &str,
    compute: impl FnOnce(*const BlockQ4_1, *const BlockQ8_1, *mut f32),
) {
    let mut noise = Noise(seed);
    let a = weights(&mut noise, shape.m * shape.lda);
    let b = tokens(&mut noise, shape.n * shape.ldb);
    let mut c = vec![f32::NAN; shape.n * shape.ldc];
    assert!(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));
    compute(a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: ggml's own initialisation and type table.
    let vec_dot = unsafe {
        ggml::ggml_cpu_init();
        let traits = &*ggml::ggml_get_type_traits_cpu(ggml::GGML_TYPE_Q4_1);
        assert_eq!(traits.vec_dot_type, ggml::GGML_TYPE_Q8_1);
        traits.vec_dot.unwrap()
    };
    for j in 0..shape.n {
        for i in 0..shape.m {
            let mut want = 0f32;
            // SAFETY: row i of A and row j of B hold k blocks each.
            unsafe {
                vec_dot(
                    (shape.k * 32) as c_int,
                    &mut want,
                    0,
                    a.as_ptr().add(i * shape.lda).cast(),
                    0,
                    b.as_ptr().add(j * shape.ldb).cast(),
                    0,
                    1,
                )
            };
            let got = c[j * shape.ldc + i];
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "row {i}, token {j} of {}x{}x{} ({how}): {got} against ggml's {want}",
                shape.m,
                shape.n,
                shape.k
            );
        }
        for pad in shape.m..shape.ldc {
            assert!(
                c[j * shape.ldc + pad].is_nan(),
                "padding {pad} of token {j} written"
            );
        }
    }
}

#[test]
fn gives_ggmls_sums_bit_for_bit() {
    let shapes = [
        (4, 2, 1),
        (13, 5, 18),
        (64, 7, 48),
        (3, 2, 18),
        (192, 31, 18),
        (5, 9, 18),
        (7, 16, 3),
    ];
    for (index, &(m, n, k)) in shapes.iter().enumerate() {
        for threads in [1, 2, 3] {
            let shape = Shape {
                m,
                n,
                k,
                lda: k + 1,
                ldb: k + 2,
                ldc: m + 3,
            };
            matches_ggml(shape, threads, 0x9e37_79b9_7f4a_7c15 ^ index as u64);
        }
    }
}

#[test]
fn leaves_fewer_tokens_than_a_tile_and_other_types_to_ggml() {
    let params = ComputeParams { ith: 0, nth: 1 };
    let (a, b) = (weights(&mut Noise(7), 2), tokens(&mut Noise(8), COLS));
    let mut c = [f32::NAN; 2 * COLS];
    // SAFETY: two rows and COLS tokens of one block each, and room for their products.
    let (single, other) = unsafe {
        let call = |n: i64, btype: c_int, c: *mut f32| {
            __wrap_llamafile_sgemm(
                &params,
                2,
                n,
                1,
                a.as_ptr().cast(),
                1,
                b.as_ptr().cast(),
                1,
                c.cast(),
                2,
                GGML_TYPE_Q4_1,
                btype,
                GGML_TYPE_F32,
            )
        };
        (
            call(COLS as i64 - 1, GGML_TYPE_Q8_1, c.as_mut_ptr()),
            call(COLS as i64, GGML_TYPE_F32, c.as_mut_ptr()),
        )
    };
    // ggml's tiled kernels take neither (they have none for Q4_1), so both fall back.
    assert!(!single && !other);
    assert!(c.iter().all(|x| x.is_nan()));
}

/// Shapes of one chunk of rows and fewer, several, and a last chunk cut short.
const SHARED_SHAPES: [(usize, usize, usize); 4] =
    [(5, 9, 18), (64, 8, 18), (100, 17, 3), (192, 31, 18)];

fn padded(m: usize, n: usize, k: usize) -> Shape {
    Shape {
        m,
        n,
        k,
        lda: k + 1,
        ldb: k + 2,
        ldc: m + 3,
    }
}

#[test]
fn a_shared_product_gives_ggmls_sums_whoever_computes_its_chunks() {
    let _serial = crate::helper::TESTS.lock();
    for (index, &(m, n, k)) in SHARED_SHAPES.iter().enumerate() {
        let shape = padded(m, n, k);
        let seed = 0x5eed ^ index as u64;
        // Another thread computes every chunk while the owner sleeps until the last is in;
        // then both at once, as ggml's thread and the helper.
        for (how, owner_works) in [("all by another thread", false), ("by two threads", true)] {
            matches_ggml_with(shape, seed, how, |a, b, c| {
                // SAFETY: the CPU has the features (asserted); the matrices have the shape's
                // sizes and outlive the product's wait.
                let product = unsafe { shared::Product::new(shape, a, b, c) };
                let chunks = product.chunks();
                let work = crate::helper::SharedWork::new(product, chunks);
                std::thread::scope(|scope| {
                    scope.spawn(|| work.run());
                    if owner_works {
                        work.run();
                    }
                    work.wait();
                });
            });
        }
        // Through the helper, as ggml's one thread calls it.
        matches_ggml_with(shape, seed, "with the helper", |a, b, c| {
            // SAFETY: as above.
            unsafe { shared::gemm_shared(shape, a, b, c) };
        });
    }
    assert!(
        crate::helper::helped_pieces() > 0,
        "no chunk came from another thread"
    );
}
