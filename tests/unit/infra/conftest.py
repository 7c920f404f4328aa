from .infra_helpers import after_build, mocks  # noqa: F401  (fixtures)
