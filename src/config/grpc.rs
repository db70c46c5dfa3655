//! The gRPC status codes, as settings name them (`release_grpc_statuses`) and as the
//! `grpc-status` trailer carries them (their numbers).

use serde::{Deserialize, Serialize};

/// A gRPC status code, written in settings by its canonical name (`"UNAVAILABLE"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GrpcCode {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl GrpcCode {
    /// Every code, by number (the index is the code's number).
    const ALL: [GrpcCode; 17] = [
        Self::Ok,
        Self::Cancelled,
        Self::Unknown,
        Self::InvalidArgument,
        Self::DeadlineExceeded,
        Self::NotFound,
        Self::AlreadyExists,
        Self::PermissionDenied,
        Self::ResourceExhausted,
        Self::FailedPrecondition,
        Self::Aborted,
        Self::OutOfRange,
        Self::Unimplemented,
        Self::Internal,
        Self::Unavailable,
        Self::DataLoss,
        Self::Unauthenticated,
    ];

    /// The code's number, as `grpc-status` carries it.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// The code with this number; `None` for numbers gRPC does not define.
    pub fn from_number(n: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(n).ok()?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_grpc_ones_and_names_parse() {
        assert_eq!(GrpcCode::Unavailable.number(), 14);
        assert_eq!(GrpcCode::Unauthenticated.number(), 16);
        for (i, code) in GrpcCode::ALL.iter().enumerate() {
            assert_eq!(GrpcCode::from_number(i as u32), Some(*code));
        }
        assert_eq!(GrpcCode::from_number(17), None);
        #[derive(Deserialize)]
        struct T {
            c: Vec<GrpcCode>,
        }
        let t: T = toml::from_str("c = [\"RESOURCE_EXHAUSTED\", \"OK\"]").unwrap();
        assert_eq!(t.c, [GrpcCode::ResourceExhausted, GrpcCode::Ok]);
        assert!(toml::from_str::<T>("c = [\"unavailable\"]").is_err());
    }
}
