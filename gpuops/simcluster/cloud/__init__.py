"""The cloud provider: node pools that grow and shrink like EKS node groups (AWS in moto)."""
