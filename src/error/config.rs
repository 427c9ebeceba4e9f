//! Configuration errors, as data: every problem of a configuration, each
//! named by its field.

use std::fmt;

/// A configuration was rejected. Lists every problem found, each with the
/// field it concerns and the value given.
///
/// # Example
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// let err = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).burst(0).bounds(5.0, 1.0))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.problems().len(), 2); // the burst and the bounds
/// assert_eq!(err.problems()[0].field(), "rate.burst");
/// assert_eq!(err.problems()[0].to_string(), "rate.burst: must be at least 1, got 0");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    pub(crate) fn new(problems: Vec<ConfigProblem>) -> Self {
        debug_assert!(!problems.is_empty());
        Self { problems }
    }

    /// The error listing `problems`, or `None` if there are none: for an
    /// integration's own fallible constructors, which report bad input as
    /// the builder does.
    ///
    /// ```
    /// use portcullis::error::{ConfigError, ConfigProblem};
    ///
    /// let found = vec![ConfigProblem::new("header", "must be a header name, got \"a b\"")];
    /// let error = ConfigError::from_problems(found).unwrap();
    /// assert_eq!(error.to_string(), "invalid configuration: header: must be a header name, got \"a b\"");
    /// assert!(ConfigError::from_problems(Vec::new()).is_none());
    /// ```
    pub fn from_problems(problems: impl IntoIterator<Item = ConfigProblem>) -> Option<Self> {
        let problems: Vec<ConfigProblem> = problems.into_iter().collect();
        (!problems.is_empty()).then_some(Self { problems })
    }

    /// Every problem found, in the order the fields were checked.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let err = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0).burst(0))
    ///     .key_space(KeySpaceConfig::new().max_keys(0))
    ///     .build()
    ///     .unwrap_err();
    /// let fields: Vec<&str> = err.problems().iter().map(|p| p.field()).collect();
    /// assert_eq!(fields, ["rate.burst", "max_keys"]);
    /// ```
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration: ")?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// One problem is an error of its own.
///
/// ```
/// use portcullis::error::{ConfigError, ConfigProblem};
///
/// let error = ConfigError::from(ConfigProblem::new("ipv6_prefix", "must be at most 128, got 200"));
/// assert_eq!(error.problems()[0].field(), "ipv6_prefix");
/// ```
impl From<ConfigProblem> for ConfigError {
    fn from(problem: ConfigProblem) -> Self {
        Self {
            problems: vec![problem],
        }
    }
}

/// One field of a configuration and what is wrong with it.
///
/// Displays as `path.to.field: what is wrong, got VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// ```
/// use portcullis::RateConfig;
///
/// let err = RateConfig::adaptive(10.0).bounds(1.0, f64::NAN).validate().unwrap_err();
/// let problem = &err.problems()[0];
/// assert_eq!(problem.to_string(), "rate.upper_bound: must be a finite number, got NaN");
/// ```
pub struct ConfigProblem {
    field: String,
    message: String,
}

impl ConfigProblem {
    /// A problem with `field`: `message` says what is wrong, with the
    /// value given.
    ///
    /// ```
    /// use portcullis::error::ConfigProblem;
    ///
    /// let problem = ConfigProblem::new("max_len", "must be above 0, got 0");
    /// assert_eq!(problem.to_string(), "max_len: must be above 0, got 0");
    /// ```
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The path of the field, e.g. `rate.burst` or `rate_override["api"].lower_bound`.
    ///
    /// ```
    /// use portcullis::RateConfig;
    ///
    /// let err = RateConfig::adaptive(10.0).burst(0).validate().unwrap_err();
    /// assert_eq!(err.problems()[0].field(), "rate.burst");
    /// ```
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with it, including the value given.
    ///
    /// ```
    /// use portcullis::RateConfig;
    ///
    /// let err = RateConfig::adaptive(10.0).burst(0).validate().unwrap_err();
    /// assert_eq!(err.problems()[0].message(), "must be at least 1, got 0");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Collects the problems of one configuration, prefixing each with its path.
#[derive(Debug)]
pub(crate) struct Problems<'a> {
    prefix: &'a str,
    found: &'a mut Vec<ConfigProblem>,
}

impl<'a> Problems<'a> {
    pub(crate) fn new(prefix: &'a str, found: &'a mut Vec<ConfigProblem>) -> Self {
        Self { prefix, found }
    }

    /// How many problems have been found so far, under any prefix.
    pub(crate) fn len(&self) -> usize {
        self.found.len()
    }

    pub(crate) fn add(&mut self, field: &str, message: impl Into<String>) {
        let path = match (self.prefix, field) {
            ("", field) => field.to_owned(),
            (prefix, "") => prefix.to_owned(),
            (prefix, field) => format!("{prefix}.{field}"),
        };
        self.found.push(ConfigProblem::new(path, message));
    }
}
