//! The declarative topology: topics, routes, components.
