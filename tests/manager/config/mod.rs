//! The manager built from configuration files: parsing, validation with
//! paths, every field, and fuzzing.

mod every_field;
mod files;
mod fuzz;
mod setters;
