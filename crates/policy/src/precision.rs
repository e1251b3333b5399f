//! The compute precision of the policy: f32, or bf16 with f32 master weights.

use std::fmt;
use std::str::FromStr;

use burn::tensor::FloatDType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The dtype the decoder computes in. The parameters (the master weights the optimizer
/// updates, and its state) stay f32 either way: with [`Precision::Bf16`] every weight is cast
/// to bf16 where it is used, inside the autodiff graph, so its gradient arrives in f32.
/// RMSNorm, the output projection and the log-softmax run in f32 in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Everything in f32.
    #[default]
    F32,
    /// Matrix products, attention and the MLP in bf16.
    Bf16,
}

impl Precision {
    /// The name in configs and on the command line: `f32` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }

    /// The Burn dtype of the activations.
    pub fn dtype(self) -> FloatDType {
        match self {
            Self::F32 => FloatDType::F32,
            Self::Bf16 => FloatDType::BF16,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" | "fp32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            other => Err(format!(
                "`{other}` is not a precision: expected `f32` or `bf16`"
            )),
        }
    }
}

impl Serialize for Precision {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Precision {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
