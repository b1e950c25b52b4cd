//! Chainable setters for the option structs outside crates build: they are
//! `#[non_exhaustive]` (a new option is no breaking change), so they cannot
//! be written as literals, and each field gets a setter instead. One macro
//! writes them all, so they cannot drift apart.

/// Inside an `impl` block: `setters!(/// doc; name: Type, ...)` writes
/// `pub fn name(self, name: Type) -> Self` for each field; a field of type
/// `Option<T>` takes `impl Into<Option<T>>` (a value or `None`).
macro_rules! setters {
    () => {};
    ($(#[doc = $doc:literal])* $name:ident: Option<$ty:ty> $(, $($rest:tt)*)?) => {
        $(#[doc = $doc])*
        #[must_use]
        pub fn $name(mut self, $name: impl Into<Option<$ty>>) -> Self {
            self.$name = $name.into();
            self
        }
        $($crate::setters::setters!($($rest)*);)?
    };
    ($(#[doc = $doc:literal])* $name:ident: $ty:ty $(, $($rest:tt)*)?) => {
        $(#[doc = $doc])*
        #[must_use]
        pub fn $name(mut self, $name: $ty) -> Self {
            self.$name = $name;
            self
        }
        $($crate::setters::setters!($($rest)*);)?
    };
}
pub(crate) use setters;
