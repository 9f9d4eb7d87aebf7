//! Provider presets as data, and `--model provider:model` parsing. A preset names the wire
//! format, the default base URL and the environment variable holding the key.

use std::time::Duration;

use crate::anthropic::AnthropicProvider;
use crate::error::LlmError;
use crate::ollama::OllamaProvider;
use crate::openai::OpenAiProvider;
use crate::provider::{HttpSettings, Provider};

/// Which wire format a preset speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Ollama `/api/chat`.
    Ollama,
}

/// One known provider.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// The name before the colon in `--model`.
    pub name: &'static str,
    /// Wire format.
    pub wire: Wire,
    /// Default base URL.
    pub base_url: &'static str,
    /// Env var with the API key, if the service needs one.
    pub key_env: Option<&'static str>,
}

/// Every preset.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "openai",
        wire: Wire::OpenAi,
        base_url: "https://api.openai.com/v1",
        key_env: Some("OPENAI_API_KEY"),
    },
    Preset {
        name: "anthropic",
        wire: Wire::Anthropic,
        base_url: "https://api.anthropic.com",
        key_env: Some("ANTHROPIC_API_KEY"),
    },
    Preset {
        name: "ollama",
        wire: Wire::Ollama,
        base_url: "http://127.0.0.1:11434",
        key_env: None,
    },
    Preset {
        name: "ollama-openai",
        wire: Wire::OpenAi,
        base_url: "http://127.0.0.1:11434/v1",
        key_env: None,
    },
    Preset {
        name: "groq",
        wire: Wire::OpenAi,
        base_url: "https://api.groq.com/openai/v1",
        key_env: Some("GROQ_API_KEY"),
    },
    Preset {
        name: "openrouter",
        wire: Wire::OpenAi,
        base_url: "https://openrouter.ai/api/v1",
        key_env: Some("OPENROUTER_API_KEY"),
    },
    Preset {
        name: "deepseek",
        wire: Wire::OpenAi,
        base_url: "https://api.deepseek.com/v1",
        key_env: Some("DEEPSEEK_API_KEY"),
    },
    Preset {
        name: "vllm",
        wire: Wire::OpenAi,
        base_url: "http://127.0.0.1:8000/v1",
        key_env: Some("VLLM_API_KEY"),
    },
    Preset {
        name: "lmstudio",
        wire: Wire::OpenAi,
        base_url: "http://127.0.0.1:1234/v1",
        key_env: None,
    },
    Preset {
        name: "llamacpp",
        wire: Wire::OpenAi,
        base_url: "http://127.0.0.1:8080/v1",
        key_env: None,
    },
];

/// Settings for building a provider.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// Overrides the preset's base URL.
    pub base_url: Option<String>,
    /// Overrides the key from the environment.
    pub api_key: Option<String>,
    /// Time to connect and get response headers.
    pub request_timeout: Duration,
    /// Longest silence inside a stream.
    pub idle_timeout: Duration,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            base_url: None,
            api_key: None,
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// Builds a provider from `provider:model`, e.g. `openai:gpt-4o-mini`, `ollama:qwen3:4b`.
pub fn provider_for(spec: &str, options: &ProviderOptions) -> Result<Box<dyn Provider>, LlmError> {
    let (preset_name, model) = spec.split_once(':').ok_or_else(|| {
        LlmError::Config(format!(
            "--model \"{spec}\": write provider:model, e.g. openai:gpt-4o-mini; providers: {}",
            names()
        ))
    })?;
    let preset = PRESETS
        .iter()
        .find(|p| p.name == preset_name)
        .ok_or_else(|| {
            LlmError::Config(format!(
                "--model \"{spec}\": unknown provider \"{preset_name}\"; known: {}",
                names()
            ))
        })?;
    if model.is_empty() {
        return Err(LlmError::Config(format!(
            "--model \"{spec}\": the model name after the colon is empty"
        )));
    }
    let base_url = options
        .base_url
        .clone()
        .unwrap_or_else(|| preset.base_url.to_string());
    let api_key = options.api_key.clone().or_else(|| {
        preset
            .key_env
            .and_then(|k| std::env::var(k).ok())
            .filter(|k| !k.is_empty())
    });
    // A hosted service without its key would only answer 401 after DNS, TLS and retries
    // (or, offline, a lookup failure that says nothing about the key): say so now.
    if let (Some(key_env), None, None) = (preset.key_env, &api_key, &options.base_url)
        && preset.base_url.starts_with("https://")
    {
        return Err(LlmError::Config(format!(
            "--model \"{spec}\" needs an API key: set {key_env} (or pass --base-url for a server that needs none)"
        )));
    }
    let settings = HttpSettings {
        provider: spec.to_string(),
        key_env: preset.key_env.map(str::to_string),
        request_timeout: options.request_timeout,
        idle_timeout: options.idle_timeout,
    };
    let name = spec.to_string();
    let model = model.to_string();
    Ok(match preset.wire {
        Wire::OpenAi => Box::new(OpenAiProvider::new(
            name, model, base_url, api_key, settings,
        )?),
        Wire::Anthropic => Box::new(AnthropicProvider::new(
            name, model, base_url, api_key, settings,
        )?),
        Wire::Ollama => Box::new(OllamaProvider::new(name, model, base_url, settings)?),
    })
}

fn names() -> String {
    PRESETS
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_errors_list_providers() {
        let options = ProviderOptions::default();
        assert_eq!(
            provider_for("ollama:qwen3:4b", &options).unwrap().name(),
            "ollama:qwen3:4b"
        );
        let err = provider_for("opnai:gpt", &options)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("unknown provider \"opnai\"") && err.contains("openai"),
            "{err}"
        );
        assert!(provider_for("gpt-4o", &options).is_err());
        assert!(provider_for("openai:", &options).is_err());
    }
}
