//! A product in chunks of weight rows: ggml's threads each compute a run of them
//! (`super::gemm`), and when ggml runs one thread the helper thread (`crate::helper`) may take
//! some.

use super::{BlockQ4_1, BlockQ8_1, COLS, Shape, TokenTile, UnpackedRows, rows_against_tile};
use crate::helper::Pieces;

/// Weight rows per chunk: small enough that the helper's last chunk, which ggml's thread may
/// have to wait for, is a few tens of microseconds, and large enough that a chunk's rows
/// (a few kilobytes) are read from the first cache level for every tile.
pub(super) const CHUNK_ROWS: usize = 32;

/// One product: its matrices and every tile of its tokens.
pub(super) struct Product {
    shape: Shape,
    a: *const BlockQ4_1,
    c: *mut f32,
    /// Every tile of the product's tokens, filled before the helper is told.
    tiles: Vec<TokenTile>,
}

// SAFETY: `a` and `c` are read and written only for a claimed chunk, and ggml's thread does
// not return from the product (after which they may dangle) before every chunk is done
// (`helper::share` waits); chunks are disjoint runs of rows, so no two threads write the same
// output.
unsafe impl Send for Product {}
// SAFETY: as above; the tiles are read-only once the product is made.
unsafe impl Sync for Product {}

impl Product {
    /// The product of `a` and `b` into `c`, its tokens' tiles filled.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `a`, `b` and `c` hold the matrices `shape` describes,
    /// and stay valid until every chunk is computed.
    pub(super) unsafe fn new(
        shape: Shape,
        a: *const BlockQ4_1,
        b: *const BlockQ8_1,
        c: *mut f32,
    ) -> Self {
        let tiles = (0..shape.n.div_ceil(COLS))
            .map(|col_tile| {
                let mut tile = TokenTile::new(shape.k);
                // SAFETY: the caller's promise for B.
                unsafe { tile.fill(shape, b, col_tile) };
                tile
            })
            .collect();
        Product { shape, a, c, tiles }
    }

    /// How many chunks of rows it has.
    pub(super) fn chunks(&self) -> usize {
        self.shape.m.div_ceil(CHUNK_ROWS)
    }
}

impl Pieces for Product {
    type Scratch = UnpackedRows;

    fn scratch(&self, _owner: bool) -> UnpackedRows {
        UnpackedRows::new(self.shape.k)
    }

    fn compute(&self, chunk: usize, rows: &mut UnpackedRows) {
        let first = chunk * CHUNK_ROWS;
        let last = (first + CHUNK_ROWS).min(self.shape.m);
        // SAFETY: a product is made only once `super::enabled` found AVX2, FMA and F16C (the
        // promise of `new`); the rows are within A, C is alive until every chunk is done,
        // and the tiles were filled from this product's B.
        unsafe {
            rows.fill(self.shape, self.a, first, last);
            for tile in &self.tiles {
                rows_against_tile(self.shape, self.c, rows, tile);
            }
        }
    }
}

/// The whole product on ggml's one thread, shared with the helper when it is free.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `a`, `b` and `c` hold the matrices `shape` describes.
pub(super) unsafe fn gemm_shared(
    shape: Shape,
    a: *const BlockQ4_1,
    b: *const BlockQ8_1,
    c: *mut f32,
) {
    // SAFETY: the caller's promise; `share` returns only once every chunk is done.
    let product = unsafe { Product::new(shape, a, b, c) };
    let chunks = product.chunks();
    crate::helper::share(product, chunks);
}
