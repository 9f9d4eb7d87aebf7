//! Reading a safetensors file one tensor at a time: an 8-byte header length, a JSON header
//! naming each tensor's type, shape and byte range, then the data. Only the header and the
//! tensor being converted are in memory at once, so loading never holds the whole file beside
//! the model it becomes.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// The largest header accepted: MiniLM's is 20 KB; a bigger one is not this model.
const MAX_HEADER: u64 = 16 << 20;

/// An open safetensors file and its parsed header.
pub(crate) struct TensorFile {
    file: File,
    header: serde_json::Map<String, serde_json::Value>,
    data_start: u64,
    length: u64,
}

impl TensorFile {
    /// Opens `file` and reads its header.
    pub(crate) fn open(mut file: File) -> Result<TensorFile, String> {
        let length = file.metadata().map_err(|e| e.to_string())?.len();
        let mut prefix = [0u8; 8];
        file.read_exact(&mut prefix)
            .map_err(|_| "the file is shorter than its header".to_string())?;
        let header_length = u64::from_le_bytes(prefix);
        if header_length > MAX_HEADER || 8 + header_length > length {
            return Err("the header runs past the end of the file".into());
        }
        let mut header = vec![0u8; header_length as usize];
        file.read_exact(&mut header).map_err(|e| e.to_string())?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| format!("the header is not JSON: {e}"))?;
        Ok(TensorFile {
            file,
            header,
            data_start: 8 + header_length,
            length,
        })
    }

    /// The shape of an F32 tensor and where its data lies in the file.
    fn locate(&self, name: &str) -> Result<(Vec<usize>, u64), String> {
        let entry = self
            .header
            .get(name)
            .ok_or_else(|| format!("no tensor {name}"))?;
        if entry["dtype"] != "F32" {
            return Err(format!("{name} is {}, not F32", entry["dtype"]));
        }
        let shape: Vec<usize> = entry["shape"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_u64().map(|d| d as usize))
            .collect();
        let (start, end) = entry["data_offsets"]
            .as_array()
            .filter(|r| r.len() == 2)
            .and_then(|r| Some((r[0].as_u64()?, r[1].as_u64()?)))
            .ok_or_else(|| format!("{name} has no byte range"))?;
        if end < start || self.data_start + end > self.length {
            return Err(format!("{name} runs past the end of the file"));
        }
        if end - start != shape.iter().product::<usize>() as u64 * 4 {
            return Err(format!("{name}'s shape {shape:?} does not fit its bytes"));
        }
        Ok((shape, self.data_start + start))
    }

    /// The rows × columns of a matrix tensor.
    pub(crate) fn matrix_shape(&self, name: &str) -> Result<(usize, usize), String> {
        match self.locate(name)?.0.as_slice() {
            [rows, columns] => Ok((*rows, *columns)),
            shape => Err(format!("{name} is {shape:?}, not a matrix")),
        }
    }

    /// Rows `rows` of the matrix `name`, as floats, row after row.
    pub(crate) fn rows(
        &mut self,
        name: &str,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, String> {
        let (total, columns) = self.matrix_shape(name)?;
        if rows.end > total {
            return Err(format!("{name} has {total} rows, not {}", rows.end));
        }
        let (_, at) = self.locate(name)?;
        self.floats(at + (rows.start * columns * 4) as u64, rows.len() * columns)
    }

    /// The whole tensor `name` (any shape), as floats.
    pub(crate) fn tensor(&mut self, name: &str) -> Result<Vec<f32>, String> {
        let (shape, at) = self.locate(name)?;
        self.floats(at, shape.iter().product())
    }

    /// The whole matrix `name` with its rows × columns.
    pub(crate) fn matrix(&mut self, name: &str) -> Result<(Vec<f32>, usize, usize), String> {
        let (rows, columns) = self.matrix_shape(name)?;
        Ok((self.tensor(name)?, rows, columns))
    }

    /// The vector `name`, which must have `length` entries.
    pub(crate) fn vector(&mut self, name: &str, length: usize) -> Result<Vec<f32>, String> {
        let (shape, _) = self.locate(name)?;
        if shape != [length] {
            return Err(format!("{name} is {shape:?}, not [{length}]"));
        }
        self.tensor(name)
    }

    /// `count` floats from byte `at`, read through a small buffer so that loading holds no
    /// second copy of a tensor.
    fn floats(&mut self, at: u64, count: usize) -> Result<Vec<f32>, String> {
        const CHUNK: usize = 64 << 10;
        let mut floats = Vec::with_capacity(count);
        let mut bytes = [0u8; CHUNK];
        self.file
            .seek(SeekFrom::Start(at))
            .map_err(|e| e.to_string())?;
        let mut left = count * 4;
        while left > 0 {
            let part = &mut bytes[..left.min(CHUNK)];
            self.file.read_exact(part).map_err(|e| e.to_string())?;
            floats.extend(
                part.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            left -= part.len();
        }
        Ok(floats)
    }
}
